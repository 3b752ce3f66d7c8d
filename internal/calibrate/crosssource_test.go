package calibrate

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// By hand (docs/metrics.md, "The twin's 80 % interval"): source A's four
// rows weigh 1/8 each, source B's one row 1/2.
func TestSourceQuantileByHand(t *testing.T) {
	errs := []SourcedError{{"A", 0.1}, {"A", -0.2}, {"A", 0.3}, {"A", 0.4}, {"B", -0.05}, {"B", math.NaN()}}
	for _, c := range []struct{ q, want float64 }{
		// sorted |error|: 0.05 (B, 1/2), 0.1 (5/8), 0.2 (6/8), 0.3 (7/8), 0.4 (1)
		{0.8, 0.3}, {0.5, 0.05}, {0.75, 0.2}, {0.9, 0.4}, {0.1, 0.05},
	} {
		if got := SourceQuantile(errs, c.q); got != c.want {
			t.Errorf("q %.2f: %v, want %v", c.q, got, c.want)
		}
	}
	if got := SourceQuantile(nil, 0.8); got != 0 {
		t.Errorf("no errors: %v, want 0", got)
	}
}

// crossSourceErrors predicts every fit source's rows with the constants
// and front end the twin would have without that source (leave one
// source out; docs/performance.md, "Intervals"): the 2024 NIM rows with
// the GPU family's defaults (the trtllm constants are their fits); NIM
// 1.8.0's page with the shipped trtllm constants, its predict-half row
// only (its other row is among the 121 those constants were fitted on);
// the RTX 4090 vLLM rows with the GPU family's defaults (vllm ships none);
// GPUStack's rows with their family's shipped constants and no front end
// (the front ends are fitted on them alone).
func crossSourceErrors(t *testing.T) []RowError {
	t.Helper()
	loaded, err := LoadPublic(publicRows)
	if err != nil {
		t.Fatal(err)
	}
	recentFit, _ := splitRecent(t)
	_, predict := Split(loaded)
	var out []RowError
	for _, r := range append(loaded, recentFit...) {
		var eff perfmodel.Efficiency
		intake := intakeOf(r)
		switch {
		case strings.HasPrefix(r.Source, nimSource):
			eff, err = defaultEff(r)
		case strings.HasPrefix(r.Source, nimPageSource):
			if !containsRow(predict, r) {
				continue
			}
			eff, err = FamilyEff(r)
		case strings.HasPrefix(r.Source, recentFitSource):
			eff, err = FamilyEff(r)
			intake = 0
		default:
			eff, err = FamilyEff(r)
		}
		if err != nil {
			t.Fatal(err)
		}
		e, err := evaluateRow(r, eff, intake)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

const (
	nimSource     = "https://github.com/wbing520/"
	nimPageSource = "https://docs.nvidia.com/nim/"
)

func containsRow(rows []PublicRow, r PublicRow) bool {
	for _, x := range rows {
		if x.ID == r.ID {
			return true
		}
	}
	return false
}

// evaluateRow is Evaluate's error for one row with the intake given.
func evaluateRow(r PublicRow, eff perfmodel.Efficiency, intake time.Duration) (RowError, error) {
	pr, err := predictWith(r, eff, intake)
	if err != nil {
		return RowError{}, err
	}
	rel := func(p, m float64) float64 {
		if m <= 0 {
			return math.NaN()
		}
		return (p - m) / m
	}
	return RowError{Row: r, Pred: pr, TTFT: rel(pr.TTFT, r.TTFT), TPOT: rel(pr.TPOT, r.TPOT), E2E: rel(pr.E2E, r.E2E)}, nil
}

// metrics are the three means a row publishes, with their shipped widths.
var metrics = []struct {
	name  string
	err   func(RowError) float64
	width func(engine.Interval) float64
}{
	{"ttft", func(e RowError) float64 { return e.TTFT }, func(iv engine.Interval) float64 { return iv.TTFT }},
	{"tpot", func(e RowError) float64 { return e.TPOT }, func(iv engine.Interval) float64 { return iv.TPOT }},
	{"e2e", func(e RowError) float64 { return e.E2E }, func(iv engine.Interval) float64 { return iv.E2E }},
}

// The cross-source 80 % interval engine.CrossSource80 is, per metric, the
// P80 of |error| with every fit source weighing the same
// (SourceQuantile) over crossSourceErrors: each fit source's rows
// predicted without that source's data. The held-out recent sources play
// no part (TestRecentIntervalsBySource judges the widths on them).
func TestCrossSourceIntervals(t *testing.T) {
	start := time.Now()
	errs := crossSourceErrors(t)
	t.Logf("%d rows predicted in %v", len(errs), time.Since(start).Round(time.Millisecond))
	for _, m := range metrics {
		var all []SourcedError
		for _, g := range groupErrors(errs, func(r PublicRow) string { return r.Source }) {
			var se []SourcedError
			for _, e := range g.errs {
				se = append(se, SourcedError{g.name, m.err(e)})
			}
			all = append(all, se...)
			t.Logf("%s %-60.60s: %3d rows, P50 |error| %.3f, P80 %.3f, max %.3f", m.name, g.name, countNumbers(se), SourceQuantile(se, 0.5), SourceQuantile(se, 0.8), SourceQuantile(se, 1))
		}
		got, shipped := SourceQuantile(all, 0.8), m.width(engine.CrossSource80)
		var rows []float64
		for _, e := range all {
			rows = append(rows, e.Err)
		}
		t.Logf("%s: P80 over sources %.3f (shipped %.3f); pooled by row it would be %.3f", m.name, got, shipped, rowQuantile(rows, 0.8))
		if math.Abs(got-shipped) > 0.0005 {
			t.Errorf("%s: engine.CrossSource80 has %.3f, the fit sources give %.3f", m.name, shipped, got)
		}
	}
}

// countNumbers is how many errors are numbers.
func countNumbers(se []SourcedError) int {
	n := 0
	for _, e := range se {
		if !math.IsNaN(e.Err) {
			n++
		}
	}
	return n
}

// rowQuantile is the nearest-rank q-quantile of |x| over the numbers of xs.
func rowQuantile(xs []float64, q float64) float64 {
	var se []SourcedError
	for i, x := range xs {
		se = append(se, SourcedError{fmt.Sprint(i), x})
	}
	return SourceQuantile(se, q)
}

// Kinds of extrapolation within the 2024 NIM source, logged beside the
// cross-source widths (docs/performance.md, "Intervals"): its predict-half
// rows timed with the trtllm constants of the other GPU (a new GPU) and,
// for the H100 rows, of the other weight precision (a new precision).
// Not shipped: each is one source's rows, not a new source.
func TestExtrapolationKinds(t *testing.T) {
	rows, err := LoadPublic(publicRows)
	if err != nil {
		t.Fatal(err)
	}
	_, predict := Split(rows)
	fam, err := engine.LookupFamily("trtllm")
	if err != nil {
		t.Fatal(err)
	}
	other := map[string]string{"A100-80GB-SXM": "H100-SXM", "H100-SXM": "A100-80GB-SXM"}
	kinds := []struct {
		name string
		eff  func(PublicRow) (perfmodel.Efficiency, bool)
	}{
		{"another GPU's constants (same precision where fitted)", func(r PublicRow) (perfmodel.Efficiency, bool) {
			if r.DType == string(perfmodel.FP8) {
				return perfmodel.Efficiency{}, false // A100 has no FP8 constants
			}
			return fam.ConstantsFor(other[r.GPU], perfmodel.BF16)
		}},
		{"the other precision's constants (H100)", func(r PublicRow) (perfmodel.Efficiency, bool) {
			if r.GPU != "H100-SXM" {
				return perfmodel.Efficiency{}, false
			}
			if r.DType == string(perfmodel.FP8) {
				return fam.ConstantsFor(r.GPU, perfmodel.BF16)
			}
			return fam.ConstantsFor(r.GPU, perfmodel.FP8)
		}},
	}
	for _, k := range kinds {
		var sel []PublicRow
		effs := map[string]perfmodel.Efficiency{}
		for _, r := range predict {
			if !strings.HasPrefix(r.Source, nimSource) {
				continue
			}
			if eff, ok := k.eff(r); ok {
				sel, effs[r.ID] = append(sel, r), eff
			}
		}
		errs, err := Evaluate(sel, func(r PublicRow) (perfmodel.Efficiency, error) { return effs[r.ID], nil })
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range metrics {
			var xs []float64
			for _, e := range errs {
				xs = append(xs, m.err(e))
			}
			t.Logf("%s, %s: %d rows, P50 |error| %.3f, P80 %.3f", k.name, m.name, len(xs), rowQuantile(xs, 0.5), rowQuantile(xs, 0.8))
		}
	}
}
