package verify

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"strings"

	"github.com/tokentrace/tokentrace/internal/chart"
)

// Formats are the forms a verify is written in.
var Formats = []string{"text", "md", "json", "html"}

// Write writes the result in format.
func (r *Result) Write(w io.Writer, format string) error {
	switch format {
	case "", "text":
		return r.writeText(w)
	case "md", "markdown":
		return r.writeMarkdown(w)
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case "html":
		figs, err := r.figures()
		if err != nil {
			return err
		}
		return verifyHTML.Execute(w, struct {
			*Result
			Title   string
			Figures []figure
		}{r, "tokentrace verify", figs})
	}
	return fmt.Errorf("format %q: want one of %s", format, strings.Join(Formats, ", "))
}

// val formats a row's value in its unit.
func val(v float64, unit string) string {
	if unit == "ms" {
		switch {
		case v >= 1000:
			return fmt.Sprintf("%.2fs", v/1000)
		case v >= 100:
			return fmt.Sprintf("%.0fms", v)
		case v >= 10:
			return fmt.Sprintf("%.1fms", v)
		}
		return fmt.Sprintf("%.2fms", v)
	}
	return fmt.Sprintf("%.3g %s", v, unit)
}

func signedPct(e float64) string { return fmt.Sprintf("%+.1f%%", 100*e) }

// Summary is the verify in one line.
func (r *Result) Summary() string {
	lever := r.Lever
	if lever == "" {
		lever = "no modelled change"
	}
	return fmt.Sprintf("%s: %d of %d measurements within the twin's 80 %% interval", lever, r.Held, r.Judged)
}

func (r *Result) writeText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "VERIFY %s → %s\n", r.Before, r.After)
	for _, c := range r.Changes {
		fmt.Fprintf(&b, "  change: %s\n", c)
	}
	fmt.Fprintf(&b, "  twin: %s; after the change: %s; %d draws\n\n", r.Basis, r.Deployment, r.Draws)
	fmt.Fprintf(&b, "  %-10s %-5s %10s %10s %23s %10s %8s  %s\n", "metric", "stat", "before", "twin", "predicted [80 %]", "measured", "error", "verdict")
	for _, x := range r.Rows {
		if x.Verdict == NoData {
			continue
		}
		fmt.Fprintf(&b, "  %-10s %-5s %10s %10s %23s %10s %8s  %s\n", x.Metric, x.Stat, val(x.Before, x.Unit), val(x.TwinBefore, x.Unit),
			fmt.Sprintf("%s [%s…%s]", val(x.Predicted, x.Unit), val(x.Low, x.Unit), val(x.High, x.Unit)),
			val(x.Measured, x.Unit), signedPct(x.Error), x.Verdict)
	}
	fmt.Fprintf(&b, "\n  %s\n", r.Summary())
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	fmt.Fprintf(&b, "  method: %s\n", r.Method)
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *Result) writeMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## Verify: `%s` → `%s`\n\n", r.Before, r.After)
	for _, c := range r.Changes {
		fmt.Fprintf(&b, "- change: %s\n", mdEscape(c.String()))
	}
	fmt.Fprintf(&b, "\nTwin: %s; after the change: %s; %d draws.\n\n", mdEscape(r.Basis), mdEscape(r.Deployment), r.Draws)
	b.WriteString("| metric | stat | before | twin before | predicted | 80 % interval | measured | error | verdict |\n|---|---|---:|---:|---:|---:|---:|---:|---|\n")
	for _, x := range r.Rows {
		if x.Verdict == NoData {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s … %s | %s | %s | %s |\n", x.Metric, x.Stat, val(x.Before, x.Unit), val(x.TwinBefore, x.Unit),
			val(x.Predicted, x.Unit), val(x.Low, x.Unit), val(x.High, x.Unit), val(x.Measured, x.Unit), signedPct(x.Error), x.Verdict)
	}
	fmt.Fprintf(&b, "\n%s.\n\n", r.Summary())
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- %s\n", mdEscape(n))
	}
	fmt.Fprintf(&b, "\n_%s_\n", mdEscape(r.Method))
	_, err := io.WriteString(w, b.String())
	return err
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

var verifyHTML = chart.Page("verify", template.FuncMap{"val": val, "pct": signedPct,
	"cls": func(v Verdict) string {
		switch v {
		case AsPredicted:
			return "ok"
		case Better:
			return "info"
		case Worse:
			return "warn"
		}
		return "crit"
	}}, `th:first-child, td:first-child, td:nth-child(2), th:last-child, td:last-child { text-align:left; }
.charts { display:grid; grid-template-columns:repeat(auto-fit,minmax(320px,1fr)); gap:14px; margin-top:18px; }
.ok { color:var(--ok); } .info { color:var(--info); } .warn { color:var(--warn); } .crit { color:var(--crit); font-weight:700; }
`, `<h1>{{.Title}}</h1>
<p>Before: <code>{{.Before}}</code><br>After: <code>{{.After}}</code></p>
<ul>{{range .Changes}}<li>{{.String}}</li>{{end}}</ul>
<p class="muted">Twin: {{.Basis}}; after the change: {{.Deployment}}; {{.Draws}} draws.</p>
<div class="scroll"><table><tr><th>metric</th><th>stat</th><th>before</th><th>twin before</th><th>predicted</th><th>80 % interval</th><th>measured</th><th>error</th><th>verdict</th></tr>
{{range .Rows}}{{if ne .Verdict "no data"}}<tr><td>{{.Metric}}</td><td>{{.Stat}}</td><td>{{val .Before .Unit}}</td><td>{{val .TwinBefore .Unit}}</td><td>{{val .Predicted .Unit}}</td><td>{{val .Low .Unit}} … {{val .High .Unit}}</td><td>{{val .Measured .Unit}}</td><td>{{pct .Error}}</td><td class="{{cls .Verdict}}">{{.Verdict}}</td></tr>
{{end}}{{end}}</table></div>
<p><b>{{.Summary}}</b></p>
<div class="charts">{{range .Figures}}<figure id="fig-{{.Metric}}">{{.SVG}}<figcaption>{{.Metric}}: before ○, predicted □ with its 80 % interval, after ×</figcaption></figure>{{end}}</div>
{{range .Notes}}<p class="muted">{{.}}</p>{{end}}
<p class="muted">{{.Method}}</p>
`)
