package calibrate

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// sweepKey names a row's sweep: the rows of one engine, model, GPU, TP,
// precisions and lengths, which differ only in concurrency.
func sweepKey(r PublicRow) string {
	return fmt.Sprintf("%s|%s|%s|%s|%d|%s|%s|%d|%d", r.Engine, r.EngineVersion, r.Model, r.GPU, r.TP, r.DType, r.KVDType, r.Input, r.Output)
}

// Group names the rows reported together: one engine on one GPU.
func Group(r PublicRow) string { return r.Engine + " on " + r.GPU }

// FitGroup names the rows calibrated together: one engine on one GPU, with
// FP8 weights apart from 16-bit ones (their prefill reaches a smaller
// fraction of its peak, and their decode reads half the bytes per weight:
// one set of fractions cannot hold both; docs/performance.md, "Under
// load").
func FitGroup(r PublicRow) string {
	if r.DType == string(perfmodel.FP8) {
		return Group(r) + ", " + r.DType
	}
	return Group(r)
}

// Split divides the rows into a fit half and a predict half by a fixed
// rule: within each sweep, sorted by concurrency, the 1st, 3rd, 5th, …
// points are fitted and the 2nd, 4th, … predicted. Both halves then span
// every sweep and the whole concurrency range, and no predicted point has
// a fitted twin at the same concurrency.
func Split(rows []PublicRow) (fit, predict []PublicRow) {
	sweeps := map[string][]PublicRow{}
	var keys []string
	for _, r := range rows {
		k := sweepKey(r)
		if _, ok := sweeps[k]; !ok {
			keys = append(keys, k)
		}
		sweeps[k] = append(sweeps[k], r)
	}
	for _, k := range keys {
		s := sweeps[k]
		slices.SortStableFunc(s, func(a, b PublicRow) int { return cmp.Compare(a.Concurrency, b.Concurrency) })
		for i, r := range s {
			if i%2 == 0 {
				fit = append(fit, r)
			} else {
				predict = append(predict, r)
			}
		}
	}
	return fit, predict
}

// RowError is a row's prediction and its relative errors (predicted −
// measured) / measured; NaN where the source publishes no value.
type RowError struct {
	Row             PublicRow
	Pred            Prediction
	TTFT, TPOT, E2E float64
}

// Evaluate predicts every row with the constants effFor gives it.
func Evaluate(rows []PublicRow, effFor func(PublicRow) (perfmodel.Efficiency, error)) ([]RowError, error) {
	out := make([]RowError, 0, len(rows))
	for _, r := range rows {
		eff, err := effFor(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.ID, err)
		}
		pr, err := Predict(r, eff)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.ID, err)
		}
		rel := func(p, m float64) float64 {
			if m <= 0 {
				return math.NaN()
			}
			return (p - m) / m
		}
		out = append(out, RowError{Row: r, Pred: pr, TTFT: rel(pr.TTFT, r.TTFT), TPOT: rel(pr.TPOT, r.TPOT), E2E: rel(pr.E2E, r.E2E)})
	}
	return out, nil
}

// Accuracy is the median absolute relative error of a set of rows per
// metric (NaN when no row publishes the metric), and how many rows hold
// each.
type Accuracy struct {
	Group                 string
	TTFT, TPOT, E2E       float64
	NTTFT, NTPOT, NE2E    int
	MinConcurrency, NRows int
}

// Summarize is the accuracy per group of the rows with at least
// minConcurrency clients, groups in name order, then "all".
func Summarize(errs []RowError, minConcurrency int) []Accuracy {
	by := map[string][]RowError{}
	for _, e := range errs {
		if e.Row.Concurrency >= minConcurrency {
			by[Group(e.Row)] = append(by[Group(e.Row)], e)
			by["all"] = append(by["all"], e)
		}
	}
	var names []string
	for g := range by {
		if g != "all" {
			names = append(names, g)
		}
	}
	slices.Sort(names)
	if len(by["all"]) > 0 {
		names = append(names, "all")
	}
	out := make([]Accuracy, 0, len(names))
	for _, g := range names {
		a := Accuracy{Group: g, MinConcurrency: minConcurrency, NRows: len(by[g])}
		a.TTFT, a.NTTFT = medianAbs(by[g], func(e RowError) float64 { return e.TTFT })
		a.TPOT, a.NTPOT = medianAbs(by[g], func(e RowError) float64 { return e.TPOT })
		a.E2E, a.NE2E = medianAbs(by[g], func(e RowError) float64 { return e.E2E })
		out = append(out, a)
	}
	return out
}

// medianAbs is the nearest-rank median of |f(e)| over the rows where it is
// a number.
func medianAbs(errs []RowError, f func(RowError) float64) (float64, int) {
	var xs []float64
	for _, e := range errs {
		if v := f(e); !math.IsNaN(v) {
			xs = append(xs, math.Abs(v))
		}
	}
	if len(xs) == 0 {
		return math.NaN(), 0
	}
	slices.Sort(xs)
	return stats.Percentile(xs, 50), len(xs)
}

// publicFitted names the constants FitPublic moves, in the order of the
// optimiser's point; the others keep their start.
var publicFitted = []string{"compute", "memory", "step_overhead_us", "seq_overhead_us", "all_reduce_latency_us", "context_overhead_ns", "ring_step_us"}

// publicEff maps the optimiser's point to constants: x[i] moves the
// constant names[i] (of publicFitted), fractions as the log of their ratio
// to the start (capped at 1), durations and the context overhead as the log
// of their ratio to the start or to a floor when the start is below it (the
// ring step's floor is NVLink's NCCL figure, 0.5 µs, so a start without
// one starts there). The constants not named keep their start exactly.
func publicEff(start perfmodel.Efficiency, names []string, x []float64) perfmodel.Efficiency {
	e := start
	dur := func(d, floor time.Duration, v float64) time.Duration {
		return time.Duration(float64(max(d, floor)) * math.Exp(v))
	}
	for i, n := range names {
		v := x[i]
		switch n {
		case "compute":
			e.Compute = min(1, start.Compute*math.Exp(v))
		case "memory":
			e.Memory = min(1, start.Memory*math.Exp(v))
		case "step_overhead_us":
			e.StepOverhead = dur(start.StepOverhead, 100*time.Microsecond, v)
		case "seq_overhead_us":
			e.SeqOverhead = dur(start.SeqOverhead, 5*time.Microsecond, v)
		case "all_reduce_latency_us":
			e.AllReduceLatency = dur(start.AllReduceLatency, 2*time.Microsecond, v)
		case "context_overhead_ns":
			e.ContextOverheadNS = max(start.ContextOverheadNS, contextOverheadFloorNS) * math.Exp(v)
		case "ring_step_us":
			e.RingStep = dur(start.RingStep, 500*time.Nanosecond, v)
		}
	}
	return e
}

// contextOverheadFloorNS is where FitPublic starts the context overhead
// when its start holds none: 2 ns per context token, the size of the
// long-prompt rows' TPOT gap (docs/performance.md, "Under load"); the fit
// moves it by its log, down to nothing as readily as up.
const contextOverheadFloorNS = 2

// FitPublic calibrates the performance model's constants to a group of
// public rows: the twin predicts every row as its client measured it
// (Predict) and Nelder–Mead minimises the Huber loss of the log ratio of
// predicted to measured TTFT, TPOT and E2E over the rows (PublicLoss),
// from start. It returns the fitted constants and the number of
// predictions run.
func FitPublic(ctx context.Context, rows []PublicRow, start perfmodel.Efficiency, maxEvals int) (perfmodel.Efficiency, int, error) {
	return FitPublicConstants(ctx, rows, start, publicFitted, maxEvals)
}

// FitPublicConstants is FitPublic moving only the named constants (of
// publicFitted: "compute", "memory", "step_overhead_us",
// "seq_overhead_us", "all_reduce_latency_us", "context_overhead_ns",
// "ring_step_us"); the others keep start's values.
func FitPublicConstants(ctx context.Context, rows []PublicRow, start perfmodel.Efficiency, names []string, maxEvals int) (perfmodel.Efficiency, int, error) {
	if len(rows) == 0 {
		return start, 0, fmt.Errorf("calibrate: no rows to fit")
	}
	if len(names) == 0 {
		return start, 0, nil
	}
	for _, n := range names {
		if !slices.Contains(publicFitted, n) {
			return start, 0, fmt.Errorf("calibrate: %q is not a fitted constant (%s)", n, strings.Join(publicFitted, ", "))
		}
	}
	loss := func(x []float64) (float64, error) { return PublicLoss(rows, publicEff(start, names, x)) }
	x, n, err := search{simplex: 0.3, iters: 60, tol: 1e-7}.minimize(ctx, loss, make([]float64, len(names)), maxEvals)
	if err != nil {
		return start, n, err
	}
	return publicEff(start, names, x), n, nil
}

// PublicLoss is FitPublic's loss of eff on rows: the Huber loss (rowHuber)
// of the log ratio of predicted to measured TTFT, TPOT and E2E, summed
// over the rows and the metrics each publishes.
func PublicLoss(rows []PublicRow, eff perfmodel.Efficiency) (float64, error) {
	l := 0.0
	for _, r := range rows {
		pr, err := Predict(r, eff)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", r.ID, err)
		}
		for _, m := range [][2]float64{{pr.TTFT, r.TTFT}, {pr.TPOT, r.TPOT}, {pr.E2E, r.E2E}} {
			if m[1] > 0 && m[0] > 0 {
				l += huber(math.Log(m[0]/m[1]), rowHuber)
			}
		}
	}
	return l, nil
}

// rowHuber is FitPublic's Huber threshold, 20 % in log ratio: rows the twin
// cannot follow (a client's measurement it does not model) pull linearly.
const rowHuber = 0.2
