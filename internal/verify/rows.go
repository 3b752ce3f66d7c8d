package verify

import (
	"math"

	"github.com/tokentrace/tokentrace/internal/capacity"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/results"
)

// Metrics are the latencies verify judges, at Percentiles.
var (
	Metrics     = []latency.Metric{latency.TTFT, latency.TPOT, latency.ITL, latency.E2E}
	Percentiles = []float64{50, 95, 99}
)

// rows sets each metric side by side; noise is the first run's
// (MeasureNoise), clocks the runs' clock lateness.
func rows(before, after, twinBefore *report.Report, draws []*report.Report, noise map[string]Noise, clocks []results.ClientLateness, goodput bool) []Row {
	var out []Row
	for _, m := range Metrics {
		for _, p := range Percentiles {
			get := func(r *report.Report) float64 { return distAt(r, m, p) }
			stat := "p" + pctName(p)
			n := scaled(noise[string(m)+" "+stat], countOf(after, m))
			if m == latency.TTFT || m == latency.E2E { // two instants, each late by as much
				n.ClockMS = clockAt(clocks, p)
			}
			out = append(out, row(string(m), stat, "ms", get, before, after, twinBefore, draws,
				capacity.StatedError(nil, m, p), n, false))
		}
	}
	// Rates: the two-clock limit at P50 (a rate is a mean).
	out = append(out, row("throughput", "rate", "req/s", func(r *report.Report) float64 { return r.Summary.ThroughputRPS },
		before, after, twinBefore, draws, capacity.StatedError(nil, latency.E2E, 50), Noise{}, true))
	if goodput {
		out = append(out, row("goodput", "rate", "req/s", func(r *report.Report) float64 {
			if r.AllSLOs == nil {
				return math.NaN()
			}
			return r.AllSLOs.GoodputRPS
		}, before, after, twinBefore, draws, capacity.StatedError(nil, latency.E2E, 50), Noise{}, true))
	}
	return out
}

// scaled is the first run's noise n for a percentile the second run took
// over count values: the sampling error of the prediction, anchored on
// the first run's value, and of the second run's measurement, each
// scaling as 1/√count: σ_B·√(1 + n_B/n_A).
func scaled(n Noise, count int) Noise {
	if n.Count > 0 && count > 0 {
		n.Sampling *= math.Sqrt(1 + float64(n.Count)/float64(count))
		n.Count = count
	}
	return n
}

// anchor is the first run's value over its twin's (1 when either is not
// a positive number): the twin's bias at a row, which the prediction
// takes out.
func anchor(before, twinBefore float64) float64 {
	if !(before > 0) || !(twinBefore > 0) || math.IsInf(before, 0) || math.IsInf(twinBefore, 0) {
		return 1
	}
	return before / twinBefore
}

// countOf is how many values r's metric m was taken over (0: none).
func countOf(r *report.Report, m latency.Metric) int {
	for _, d := range r.Metrics {
		if d.Metric == string(m) {
			return int(d.Count)
		}
	}
	return 0
}

func row(metric, stat, unit string, get func(*report.Report) float64, before, after, twinBefore *report.Report, draws []*report.Report, e float64, n Noise, higherBetter bool) Row {
	r := Row{Metric: metric, Stat: stat, Unit: unit, Before: get(before), TwinBefore: get(twinBefore), Measured: get(after), StatedError: e,
		Sampling: n.Sampling, Drift: n.Drift, ClockMS: n.ClockMS}
	r.Anchor = anchor(r.Before, r.TwinBefore)
	anchored := make([]float64, 0, len(draws))
	for _, d := range draws {
		r.Draws = append(r.Draws, get(d))
		anchored = append(anchored, r.Anchor*get(d))
	}
	r.BeforeMiss = math.Abs(r.TwinBefore-r.Before) / r.Before
	r.Predicted, r.Low, r.High = Interval(anchored, RelativeError(e, r.BeforeMiss), n)
	r.Low = max(r.Low, 0) // a latency or a rate is never negative
	r.Error = (r.Measured - r.Predicted) / r.Predicted
	r.Verdict = Judge(r.Measured, r.Predicted, r.Low, r.High, higherBetter)
	if r.Predicted == 0 && r.Measured == 0 {
		r.Error, r.Verdict = 0, AsPredicted
	}
	return r.finite()
}

// finite zeroes what is not a number (JSON has none): a metric a run
// lacks is a row with no data.
func (r Row) finite() Row {
	for _, p := range []*float64{&r.Anchor, &r.BeforeMiss, &r.Sampling, &r.Drift, &r.ClockMS, &r.Before, &r.TwinBefore, &r.Predicted, &r.Low, &r.High, &r.Measured, &r.Error} {
		if math.IsNaN(*p) || math.IsInf(*p, 0) {
			*p = 0
		}
	}
	for i, x := range r.Draws {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			r.Draws[i] = 0
		}
	}
	return r
}

// RelativeError is the twin's relative error a prediction's interval
// takes: its stated error, or its miss of the first run at the same row
// when that is larger (a miss that is not a number counts as none).
func RelativeError(stated, beforeMiss float64) float64 {
	if math.IsNaN(beforeMiss) || math.IsInf(beforeMiss, 0) {
		return stated
	}
	return math.Max(stated, beforeMiss)
}

// distAt is metric m's percentile p in r, in ms (NaN when r has none).
func distAt(r *report.Report, m latency.Metric, p float64) float64 {
	for _, d := range r.Metrics {
		if d.Metric != string(m) || d.Count == 0 {
			continue
		}
		switch p {
		case 50:
			return d.P50
		case 95:
			return d.P95
		case 99:
			return d.P99
		}
	}
	return math.NaN()
}

func pctName(p float64) string {
	switch p {
	case 50:
		return "50"
	case 95:
		return "95"
	}
	return "99"
}
