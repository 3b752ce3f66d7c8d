package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
)

// WriteText writes the comparison for a terminal (at most 100 columns).
func (c *Comparison) WriteText(w io.Writer) error {
	var buf bytes.Buffer
	if err := c.writeText(&buf); err != nil {
		return err
	}
	return writeTrimmed(w, buf.Bytes())
}

func (c *Comparison) writeText(w io.Writer) error {
	b := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("A: %s\nB: %s\n\n", clip(strings.Join(c.A, ", "), 97), clip(strings.Join(c.B, ", "), 97))
	for _, line := range wrap("verdict: "+c.Verdict, 98) {
		p("%s\n", line)
	}
	if len(c.Differs) > 0 {
		p("settings that differ (each can change latency by itself):\n")
		for _, d := range c.Differs {
			p("  %-44s A %-22s B %s\n", clip(d.Setting, 44), clip(d.A, 22), clip(d.B, 24))
		}
	}
	p("\n%-24s %-4s %9s %9s %9s %7s  %-20s %s\n", "metric", "stat", "A", "B", "B − A", "Δ%", "95% CI of B − A", "beyond CI")
	for _, r := range c.Rows {
		ci, sig := "", ""
		if r.HasCI {
			ci = fmtVal(r.CI[0], r.Unit) + " … " + fmtVal(r.CI[1], r.Unit)
			sig = "no"
			if r.Significant {
				sig = "YES"
			}
		}
		sig += r.direction(" ")
		va, vb, d := r.cells()
		if r.Only != "" {
			ci = "only in " + strings.ToUpper(r.Only)
		}
		p("%-24s %-4s %9s %9s %9s %7s  %-20s %s\n", clip(r.Metric, 24), r.Stat, va, vb, d, fmtPct(r.DeltaPct), ci, sig)
	}
	if len(c.SLOs) > 0 {
		p("\n%-30s %-8s %-8s %12s %12s\n", "SLO", "A", "B", "attain A", "attain B")
		for _, s := range c.SLOs {
			p("%-30s %-8s %-8s %11.1f%% %11.1f%%\n", clip(s.SLO, 30), s.A, s.B, 100*s.AttainA, 100*s.AttainB)
		}
	}
	if c.Sweeps != nil {
		p("\n")
		for _, l := range c.Sweeps.Lines() {
			p("%s\n", l)
		}
	}
	for _, n := range c.Notes {
		p("note: %s\n", n)
	}
	return b.Flush()
}

// WriteMarkdown writes the comparison as a markdown table.
func (c *Comparison) WriteMarkdown(w io.Writer) error {
	b := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## tokentrace comparison\n\nA: `%s`  \nB: `%s`\n\n", strings.Join(c.A, "`, `"), strings.Join(c.B, "`, `"))
	p("**Verdict**: %s\n\n", mdCell(c.Verdict))
	if len(c.Differs) > 0 {
		p("| the runs differ in | A | B |\n|---|---|---|\n")
		for _, d := range c.Differs {
			p("| %s | %s | %s |\n", mdCell(d.Setting), mdCell(d.A), mdCell(d.B))
		}
		p("\n")
	}
	p("| metric | stat | A | B | B − A | Δ%% | 95%% CI of B − A | beyond CI |\n|---|---|---:|---:|---:|---:|---:|---|\n")
	for _, r := range c.Rows {
		ci, sig := "", ""
		if r.HasCI {
			ci, sig = fmtVal(r.CI[0], r.Unit)+" … "+fmtVal(r.CI[1], r.Unit), "no"
			if r.Significant {
				sig = "**yes**"
			}
		}
		sig += r.direction(" ")
		if r.Only != "" {
			ci = "only in " + strings.ToUpper(r.Only)
		}
		va, vb, d := r.cells()
		p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", mdCell(r.Metric), r.Stat, va, vb, d, fmtPct(r.DeltaPct), ci, sig)
	}
	if len(c.SLOs) > 0 {
		p("\n| SLO | A | B | attainment A | attainment B |\n|---|---|---|---:|---:|\n")
		for _, s := range c.SLOs {
			p("| `%s` | %s | %s | %.1f%% | %.1f%% |\n", s.SLO, s.A, s.B, 100*s.AttainA, 100*s.AttainB)
		}
	}
	if c.Sweeps != nil {
		p("\n")
		for _, l := range c.Sweeps.Lines() {
			p("- %s\n", mdCell(l))
		}
	}
	for _, n := range c.Notes {
		p("\n%s\n", n)
	}
	return b.Flush()
}

// WriteJSON writes the comparison's JSON form.
func (c *Comparison) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(nanToZero(c))
}

// nanToZero replaces undefined relative deltas (baseline 0) by 0 for JSON,
// which has no NaN.
func nanToZero(c *Comparison) *Comparison {
	out := *c
	out.Rows = append([]CompareRow(nil), c.Rows...)
	for i := range out.Rows {
		if math.IsNaN(out.Rows[i].DeltaPct) {
			out.Rows[i].DeltaPct = 0
		}
	}
	return &out
}

// cells are a row's A, B and B − A as shown: "—" for the run that lacks
// the metric and for their difference.
func (r CompareRow) cells() (a, b, delta string) {
	a, b, delta = fmtVal(r.A, r.Unit), fmtVal(r.B, r.Unit), fmtVal(r.Delta, r.Unit)
	switch r.Only {
	case "a":
		b, delta = "—", "—"
	case "b":
		a, delta = "—", "—"
	}
	return a, b, delta
}

// direction is "better" or "worse" for B after sep, "" when neither.
func (r CompareRow) direction(sep string) string {
	switch r.Better {
	case 1:
		return sep + "better"
	case -1:
		return sep + "worse"
	}
	return ""
}

// Direction is direction for the HTML template: its class and word.
func (r CompareRow) Direction() string { return r.direction("") }

// Cells is cells as a list, for the HTML template.
func (r CompareRow) Cells() []string {
	a, b, d := r.cells()
	return []string{a, b, d}
}

func fmtVal(v float64, unit string) string {
	switch unit {
	case "ms":
		return fmtMS(v)
	case "%":
		return fmt.Sprintf("%.2f%%", v)
	default:
		if v < 0 {
			return "-" + num(-v)
		}
		return num(v)
	}
}

func fmtPct(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", v)
}
