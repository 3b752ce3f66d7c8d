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
	p("%-18s %-5s %10s %10s %10s %8s  %-22s %s\n", "metric", "stat", "A", "B", "B − A", "Δ%", "95% CI of B − A", "beyond CI")
	for _, r := range c.Rows {
		ci, sig := "", ""
		if r.HasCI {
			ci = fmtMS(r.CI[0]) + " … " + fmtMS(r.CI[1])
			sig = "no"
			if r.Significant {
				sig = "YES"
			}
		}
		p("%-18s %-5s %10s %10s %10s %8s  %-22s %s\n", clip(r.Metric, 18), r.Stat, fmtVal(r.A, r.Unit),
			fmtVal(r.B, r.Unit), fmtVal(r.Delta, r.Unit), fmtPct(r.DeltaPct), ci, sig)
	}
	if len(c.SLOs) > 0 {
		p("\n%-30s %-8s %-8s %12s %12s\n", "SLO", "A", "B", "attain A", "attain B")
		for _, s := range c.SLOs {
			p("%-30s %-8s %-8s %11.1f%% %11.1f%%\n", clip(s.SLO, 30), s.A, s.B, 100*s.AttainA, 100*s.AttainB)
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
	p("| metric | stat | A | B | B − A | Δ%% | 95%% CI of B − A | beyond CI |\n|---|---|---:|---:|---:|---:|---:|---|\n")
	for _, r := range c.Rows {
		ci, sig := "", ""
		if r.HasCI {
			ci, sig = fmtMS(r.CI[0])+" … "+fmtMS(r.CI[1]), "no"
			if r.Significant {
				sig = "**yes**"
			}
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Metric, r.Stat, fmtVal(r.A, r.Unit), fmtVal(r.B, r.Unit),
			fmtVal(r.Delta, r.Unit), fmtPct(r.DeltaPct), ci, sig)
	}
	if len(c.SLOs) > 0 {
		p("\n| SLO | A | B | attainment A | attainment B |\n|---|---|---|---:|---:|\n")
		for _, s := range c.SLOs {
			p("| `%s` | %s | %s | %.1f%% | %.1f%% |\n", s.SLO, s.A, s.B, 100*s.AttainA, 100*s.AttainB)
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
