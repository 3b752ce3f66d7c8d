package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/tokentrace/tokentrace/internal/stats"
)

// Comparison sets two runs side by side: A is the baseline, B the
// candidate; Delta is B − A.
type Comparison struct {
	Schema int          `json:"schema"`
	A      []string     `json:"a"`
	B      []string     `json:"b"`
	Rows   []CompareRow `json:"rows"`
	SLOs   []CompareSLO `json:"slos,omitempty"`
	Notes  []string     `json:"notes,omitempty"`
	ra, rb *Report
}

// CompareRow is one statistic in both runs. For percentiles, CI is the 95 %
// bootstrap interval of the difference (each run resampled independently)
// and Significant says whether it excludes zero: the difference is larger
// than the runs' own noise.
type CompareRow struct {
	Metric      string     `json:"metric"`
	Stat        string     `json:"stat"` // "p50", "p95", "p99", "mean", or a rate
	Unit        string     `json:"unit"` // "ms", "req/s", "tok/s", "%"
	A           float64    `json:"a"`
	B           float64    `json:"b"`
	Delta       float64    `json:"delta"`
	DeltaPct    float64    `json:"delta_pct"`
	CI          [2]float64 `json:"delta_ci,omitzero"`
	HasCI       bool       `json:"has_ci"`
	Significant bool       `json:"significant"`
}

// CompareSLO is one SLO's verdict in both runs.
type CompareSLO struct {
	SLO     string  `json:"slo"`
	A       string  `json:"a"`
	B       string  `json:"b"`
	AttainA float64 `json:"attainment_a"`
	AttainB float64 `json:"attainment_b"`
}

// Compare sets report b against report a (the baseline).
func Compare(a, b *Report) *Comparison {
	c := &Comparison{Schema: Schema, A: a.Sources, B: b.Sources, ra: a, rb: b}
	rate := func(name, unit string, va, vb float64) {
		c.Rows = append(c.Rows, CompareRow{Metric: name, Stat: "rate", Unit: unit, A: va, B: vb,
			Delta: vb - va, DeltaPct: relDelta(va, vb)})
	}
	rate("throughput", "req/s", a.Summary.ThroughputRPS, b.Summary.ThroughputRPS)
	rate("output", "tok/s", a.Summary.OutputTPS, b.Summary.OutputTPS)
	errRate := func(r *Report) float64 {
		if r.Summary.Requests == 0 {
			return 0
		}
		return 100 * float64(r.Summary.Failed) / float64(r.Summary.Requests)
	}
	rate("errors", "%", errRate(a), errRate(b))
	if a.a == nil || b.a == nil {
		return c
	}
	rng := newRand(a.a.opts.seed())
	resamples := a.a.opts.resamples()
	names := append([]string{"ttft", "tpot", "itl", "e2e"}, stageNames()...)
	for _, m := range names {
		sa, sb := a.a.sampleFor(m), b.a.sampleFor(m)
		if len(sa) == 0 || len(sb) == 0 || (sa[len(sa)-1] == 0 && sb[len(sb)-1] == 0) {
			continue
		}
		for _, p := range []float64{50, 95, 99} {
			va, vb := ms(stats.Percentile(sa, p)), ms(stats.Percentile(sb, p))
			row := CompareRow{Metric: m, Stat: "p" + pct(p), Unit: "ms", A: va, B: vb, Delta: vb - va,
				DeltaPct: relDelta(va, vb)}
			if lo, hi, ok := stats.BootstrapDiffCI(sa, sb, p, resamples, rng); ok {
				row.CI, row.HasCI = [2]float64{msf(lo), msf(hi)}, true
				row.Significant = lo > 0 || hi < 0
			}
			c.Rows = append(c.Rows, row)
		}
	}
	for i, va := range a.SLOs {
		for _, vb := range b.SLOs {
			if vb.SLO == va.SLO {
				c.SLOs = append(c.SLOs, CompareSLO{SLO: va.SLO, A: va.Status, B: vb.Status,
					AttainA: a.SLOs[i].Attainment, AttainB: vb.Attainment})
			}
		}
	}
	if a.a.itl.Hist() != nil || b.a.itl.Hist() != nil {
		c.Notes = append(c.Notes, "ITL came from a histogram in at least one run; its differences carry no interval")
	}
	return c
}

func stageNames() []string {
	var out []string
	for st := stConnect; st < nStages; st++ {
		out = append(out, string(stageOrder[st]))
	}
	return out
}

// sampleFor is the sorted sample behind a metric or stage (ITL only when
// kept exactly).
func (a *analysis) sampleFor(m string) []int64 {
	if m == "itl" {
		if a.itl.Hist() != nil {
			return nil
		}
		a.gapDist("itl", &a.itl)
		return a.sorted["itl"]
	}
	return a.sample(m)
}

func relDelta(a, b float64) float64 {
	if a == 0 {
		return math.NaN()
	}
	return 100 * (b - a) / a
}

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
	p("%-14s %-5s %10s %10s %10s %8s  %-22s %s\n", "metric", "stat", "A", "B", "B − A", "Δ%", "95% CI of B − A", "beyond CI")
	for _, r := range c.Rows {
		ci, sig := "", ""
		if r.HasCI {
			ci = fmtMS(r.CI[0]) + " … " + fmtMS(r.CI[1])
			sig = "no"
			if r.Significant {
				sig = "YES"
			}
		}
		p("%-14s %-5s %10s %10s %10s %8s  %-22s %s\n", clip(r.Metric, 14), r.Stat, fmtVal(r.A, r.Unit),
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
