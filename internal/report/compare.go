package report

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// Comparison sets two runs side by side: A is the baseline, B the
// candidate; Delta is B − A.
type Comparison struct {
	Schema int      `json:"schema"`
	A      []string `json:"a"`
	B      []string `json:"b"`
	// Differs is the settings in which the runs differ, first thing
	// shown; Verdict words the headline differences in one line.
	Differs []SettingDiff `json:"settings_differ,omitempty"`
	Verdict string        `json:"verdict"`
	Rows    []CompareRow  `json:"rows"`
	SLOs    []CompareSLO  `json:"slos,omitempty"`
	Notes   []string      `json:"notes,omitempty"`
	// Sweeps are the two runs' sweep points and Pareto trade-offs, when
	// both are sweeps: the HTML form overlays their curves and fronts.
	Sweeps *CompareSweeps `json:"sweeps,omitempty"`
	// CDFs are the two runs' CDFs of TTFT, TPOT and E2E, drawn overlaid
	// in the HTML form; not part of the JSON form.
	CDFs []CompareCDF `json:"-"`
}

// CompareSweeps is two sweeps side by side.
type CompareSweeps struct {
	A       []Phase `json:"a"`
	B       []Phase `json:"b"`
	ParetoA *Pareto `json:"pareto_a"`
	ParetoB *Pareto `json:"pareto_b"`
}

// Lines is both trade-offs in words, each prefixed by its run.
func (s *CompareSweeps) Lines() []string {
	var out []string
	for _, side := range []struct {
		name string
		p    *Pareto
	}{{"A", s.ParetoA}, {"B", s.ParetoB}} {
		for _, l := range side.p.Lines() {
			out = append(out, side.name+": "+l)
		}
	}
	return out
}

// CompareCDF is one metric's CDF in both runs.
type CompareCDF struct {
	Metric latency.Metric
	A, B   []XY
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
	// Only is "a" or "b" for a part of the path (a stage of a hop, the
	// network between two hops) that only that run has: its value is
	// that run's, the other is 0 and there is no difference.
	Only string `json:"only,omitempty"`
	// Better is 1 when B is better than A on this row beyond noise, -1
	// when worse, 0 when neither (or it has no direction).
	Better int `json:"better,omitempty"`
}

// CompareSLO is one SLO's verdict in both runs.
type CompareSLO struct {
	SLO     string  `json:"slo"`
	A       Status  `json:"a"`
	B       Status  `json:"b"`
	AttainA float64 `json:"attainment_a"`
	AttainB float64 `json:"attainment_b"`
}

// Compare sets run b against run a (the baseline), each reported with its
// collector's options; the intervals use a's seed and resamples.
func Compare(a, b *Collector) *Comparison {
	aa, ab := a.analyse(), b.analyse()
	ra, rb := aa.report(a.warmup), ab.report(b.warmup)
	c := &Comparison{Schema: Schema, A: ra.Sources, B: rb.Sources}
	c.rates(ra, rb)
	c.percentiles(aa, ab)
	c.sessions(aa, ab)
	for i, va := range ra.SLOs {
		for _, vb := range rb.SLOs {
			if vb.SLO == va.SLO {
				c.SLOs = append(c.SLOs, CompareSLO{SLO: va.SLO, A: va.Status, B: vb.Status,
					AttainA: ra.SLOs[i].Attainment, AttainB: vb.Attainment})
			}
		}
	}
	if ra.Pareto != nil && rb.Pareto != nil {
		c.Sweeps = &CompareSweeps{A: ra.Phases, B: rb.Phases, ParetoA: ra.Pareto, ParetoB: rb.Pareto}
		if ra.Pareto.Per != rb.Pareto.Per || ra.Pareto.GPUs != rb.Pareto.GPUs {
			c.Notes = append(c.Notes, fmt.Sprintf("the sweeps' throughput is per %s in A and per %s in B", ra.Pareto.per(), rb.Pareto.per()))
		}
	}
	c.judge()
	c.Verdict = c.verdict()
	c.Differs = settingDiffs(ra, rb)
	if aa.itl.Hist() != nil || ab.itl.Hist() != nil {
		c.Notes = append(c.Notes, "ITL came from a histogram in at least one run; its differences carry no interval")
	}
	for _, m := range []latency.Metric{latency.TTFT, latency.TPOT, latency.E2E} {
		sa, sb := aa.sample(m), ab.sample(m)
		if len(sa) > 0 && len(sb) > 0 {
			c.CDFs = append(c.CDFs, CompareCDF{Metric: m, A: cdfPoints(sa, 400), B: cdfPoints(sb, 400)})
		}
	}
	return c
}

// rates compares throughput, output tokens and the error rate.
func (c *Comparison) rates(a, b *Report) {
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
}

// percentiles compares P50, P95 and P99 of TTFT, TPOT, ITL, E2E and every
// stage, with the bootstrap interval of each difference.
func (c *Comparison) percentiles(a, b *analysis) {
	rng := newRand(a.opts.seed())
	resamples := a.opts.resamples()
	for _, m := range []latency.Metric{latency.TTFT, latency.TPOT, latency.ITL, latency.E2E} {
		c.percentileRows(string(m), "ms", a.sampleFor(m), b.sampleFor(m), resamples, rng)
	}
	c.percentileRows("input_tokens", "tok", a.inputSample(), b.inputSample(), resamples, rng)
	pa, pb := a.partSamples(), b.partSamples()
	for _, l := range unionLabels(pa, pb) {
		sa, sb := pa.byLabel[l], pb.byLabel[l]
		switch {
		case sa == nil:
			c.onlyRows(l, "b", sb)
		case sb == nil:
			c.onlyRows(l, "a", sa)
		default:
			c.percentileRows(l, "ms", sa, sb, resamples, rng)
		}
	}
}

// percentileRows adds P50, P95 and P99 of one metric in both runs, with
// the bootstrap interval of each difference; none when either run lacks
// it or both are all zero. Values in unit "ms" are nanoseconds.
func (c *Comparison) percentileRows(m, unit string, sa, sb []int64, resamples int, rng *rand.Rand) {
	if len(sa) == 0 || len(sb) == 0 || (sa[len(sa)-1] == 0 && sb[len(sb)-1] == 0) {
		return
	}
	scale := func(v float64) float64 { return v }
	if unit == "ms" {
		scale = msf
	}
	for _, p := range []float64{50, 95, 99} {
		va, vb := scale(float64(stats.Percentile(sa, p))), scale(float64(stats.Percentile(sb, p)))
		row := CompareRow{Metric: m, Stat: "p" + pct(p), Unit: unit, A: va, B: vb, Delta: vb - va,
			DeltaPct: relDelta(va, vb)}
		if lo, hi, ok := stats.BootstrapDiffCI(sa, sb, p, resamples, rng); ok {
			row.CI, row.HasCI = [2]float64{scale(lo), scale(hi)}, true
			row.Significant = lo > 0 || hi < 0
		}
		c.Rows = append(c.Rows, row)
	}
}

// onlyRows adds P50, P95 and P99 of a part of the path that only run
// which ("a" or "b") has: its values, no difference.
func (c *Comparison) onlyRows(m, which string, s []int64) {
	for _, p := range []float64{50, 95, 99} {
		v := ms(stats.Percentile(s, p))
		row := CompareRow{Metric: m, Stat: "p" + pct(p), Unit: "ms", Only: which, DeltaPct: math.NaN()}
		if which == "a" {
			row.A = v
		} else {
			row.B = v
		}
		c.Rows = append(c.Rows, row)
	}
}

// sessions compares the complete sessions' latency and its parts (P50,
// P95, P99 with the bootstrap interval of each difference), when both runs
// have sessions: a sequential against a parallel run of tool calls
// measures what parallel calls save.
func (c *Comparison) sessions(a, b *analysis) {
	sa, sb := a.sessionSamples(), b.sessionSamples()
	if sa == nil || sb == nil {
		return
	}
	rng := newRand(a.opts.seed())
	for _, m := range append([]string{"session"}, sessionPartNames()...) {
		xa, xb := sa[m], sb[m]
		if xa[len(xa)-1] == 0 && xb[len(xb)-1] == 0 {
			continue
		}
		for _, p := range []float64{50, 95, 99} {
			va, vb := ms(stats.Percentile(xa, p)), ms(stats.Percentile(xb, p))
			row := CompareRow{Metric: m, Stat: "p" + pct(p), Unit: "ms", A: va, B: vb, Delta: vb - va, DeltaPct: relDelta(va, vb)}
			if lo, hi, ok := stats.BootstrapDiffCI(xa, xb, p, a.opts.resamples(), rng); ok {
				row.CI, row.HasCI = [2]float64{msf(lo), msf(hi)}, true
				row.Significant = lo > 0 || hi < 0
			}
			c.Rows = append(c.Rows, row)
		}
	}
	c.Notes = append(c.Notes, fmt.Sprintf("session rows: complete sessions' cumulative latency and its parts (%d sessions in A, %d in B; docs/metrics.md, \"Sessions\")",
		len(sa["session"]), len(sb["session"])))
}

func relDelta(a, b float64) float64 {
	if a == 0 {
		return math.NaN()
	}
	return 100 * (b - a) / a
}
