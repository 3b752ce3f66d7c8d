package report

import (
	"html/template"
	"io"
	"strings"

	"github.com/tokentrace/tokentrace/internal/chart"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
)

// WriteHTML writes the comparison as one self-contained page: the table of
// differences and the two runs' CDFs of TTFT, TPOT and E2E overlaid.
func (c *Comparison) WriteHTML(w io.Writer) error {
	var charts []Chart
	for _, cdf := range c.CDFs {
		m := string(cdf.Metric)
		p := chart.New("CDF of "+strings.ToUpper(m), m+" (ms)", "fraction of requests")
		if err := chart.Line(p, "A", xys(cdf.A), 0, false); err != nil {
			return err
		}
		if err := chart.Line(p, "B", xys(cdf.B), 1, false); err != nil {
			return err
		}
		p.Legend.Left = false
		svg, err := chart.SVG(p, 4*vg.Inch, 3*vg.Inch)
		if err != nil {
			return err
		}
		charts = append(charts, Chart{ID: "cdf-" + m, Title: "CDF of " + m, SVG: svg,
			Caption: "A (baseline) and B (candidate)"})
	}
	if sw := c.Sweeps; sw != nil {
		runs := []sweepRun{{name: "A", phases: sw.A, pareto: sw.ParetoA}, {name: "B", phases: sw.B, pareto: sw.ParetoB}}
		curve, err := curvePlot(runs, nil)
		if err != nil {
			return err
		}
		front, err := paretoPlot(runs)
		if err != nil {
			return err
		}
		for _, ch := range []struct {
			id, caption string
			p           *plot.Plot
		}{
			{"sweep-curve", "A (baseline) and B (candidate): TTFT p99 solid, TPOT p99 dashed; ring: each run's SLO knee", curve},
			{"sweep-pareto", "A (baseline) and B (candidate): tokens/s per user against output tokens/s " + sw.ParetoA.per() +
				"; lines: each run's Pareto front; ring: its SLO knee", front},
		} {
			svg, err := chart.SVG(ch.p, wideW, wideH)
			if err != nil {
				return err
			}
			charts = append(charts, Chart{ID: ch.id, Title: ch.p.Title.Text, SVG: svg, Caption: ch.caption, Wide: true})
		}
	}
	return compareHTML.Execute(w, struct {
		*Comparison
		Charts []Chart
		Title  string
		AName  string
		BName  string
	}{c, charts, "tokentrace comparison", strings.Join(c.A, ", "), strings.Join(c.B, ", ")})
}

var compareHTML = chart.Page("compare", template.FuncMap{
	"val": fmtVal, "pct": fmtPct, "ms": fmtMS,
	"svg": func(s string) template.HTML { return template.HTML(s) },
}, `th:first-child, td:first-child, td:nth-child(2) { text-align:left; }
.sig { font-weight:700; } .better { color:var(--ok); font-weight:700; } .worse { color:var(--crit); font-weight:700; }
#differs th, #differs td { text-align:left; }
.verdict { font-size:17px; background:#fff; border:1px solid var(--line); border-radius:8px; padding:10px 14px; }
.charts { display:grid; grid-template-columns:repeat(auto-fit,minmax(360px,1fr)); gap:14px; margin-top:18px; }
figure.wide { grid-column:1/-1; }
`, `<h1>{{.Title}}</h1>
<p>A (baseline): <code>{{.AName}}</code><br>B (candidate): <code>{{.BName}}</code></p>
<p class="verdict" id="verdict"><b>Verdict:</b> {{.Verdict}}</p>
{{if .Differs}}<h2>The runs differ in</h2><table id="differs"><tr><th>setting</th><th>A</th><th>B</th></tr>
{{range .Differs}}<tr><td>{{.Setting}}</td><td>{{.A}}</td><td>{{.B}}</td></tr>{{end}}</table>
<p class="muted">A difference here changes latency by itself: weigh the rows below with it.</p>{{end}}
<h2>Differences</h2>
<table><tr><th>metric</th><th>stat</th><th>A</th><th>B</th><th>B − A</th><th>Δ%</th><th>95% CI of B − A</th><th>beyond CI</th></tr>
{{range .Rows}}{{$c := .Cells}}<tr><td>{{.Metric}}</td><td>{{.Stat}}</td><td>{{index $c 0}}</td><td>{{index $c 1}}</td><td>{{index $c 2}}</td><td{{with .Direction}} class="{{.}}"{{end}}>{{pct .DeltaPct}}</td>
<td>{{if .HasCI}}{{val (index .CI 0) .Unit}} … {{val (index .CI 1) .Unit}}{{end}}{{if .Only}}only in {{if eq .Only "a"}}A{{else}}B{{end}}{{end}}</td><td>{{if .HasCI}}{{if .Significant}}<span class="sig">yes</span>{{else}}no{{end}}{{end}}{{with .Direction}} <span class="{{.}}">{{.}}</span>{{end}}</td></tr>
{{end}}</table>
{{if .SLOs}}<h2>SLOs</h2><table><tr><th>SLO</th><th>A</th><th>B</th></tr>
{{range .SLOs}}<tr><td><code>{{.SLO}}</code></td><td>{{.A}}</td><td>{{.B}}</td></tr>{{end}}</table>{{end}}
<div class="charts">{{range .Charts}}<figure id="fig-{{.ID}}"{{if .Wide}} class="wide"{{end}}>{{svg .SVG}}<figcaption>{{.Caption}}</figcaption></figure>{{end}}</div>
{{with .Sweeps}}<ul>{{range .Lines}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{range .Notes}}<p>{{.}}</p>{{end}}
`)
