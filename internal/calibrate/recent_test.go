package calibrate

import (
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
)

// recentRows are public closed-loop measurements of 2025–2026 engine
// releases (internal/perfmodel/testdata/README.md, "Recent sources").
const recentRows = "../perfmodel/testdata/recent.csv"

// recentFitSource is the older recent source, the one the families'
// front ends (engine.FamilyScheduler.IntakeUS) are fitted on: GPUStack's
// performance lab (Oct–Nov 2025). Every other source in recent.csv is
// newer and held out whole (docs/performance.md, "Held out by source").
const recentFitSource = "https://github.com/gpustack/"

// splitRecent splits recent.csv's rows into the fit source's and the
// held-out sources'.
func splitRecent(t *testing.T) (fit, heldOut []PublicRow) {
	t.Helper()
	rows, err := LoadPublic(recentRows)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if strings.HasPrefix(r.Source, recentFitSource) {
			fit = append(fit, r)
		} else {
			heldOut = append(heldOut, r)
		}
	}
	return fit, heldOut
}

// The front end each family ships is the one FitIntake finds on the fit
// source's rows of that family: the fit is this test (its wall time is
// logged), and a families.yaml edit that drifts from it fails here.
func TestRecentIntakeFit(t *testing.T) {
	fit, _ := splitRecent(t)
	start := time.Now()
	for _, name := range []string{"vllm", "sglang", "trtllm"} {
		var rows []PublicRow
		for _, r := range fit {
			if f, ok := engine.FamilyOf(r.Engine); ok && f.Name == name {
				rows = append(rows, r)
			}
		}
		got, loss, err := FitIntake(rows, FamilyEff)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		fam, err := engine.LookupFamily(name)
		if err != nil {
			t.Fatal(err)
		}
		shipped := familyRelease(fam, rows[0].EngineVersion).Scheduler.Intake()
		t.Logf("%-7s %s: fitted intake %v on %d rows (median |TTFT error| %.1f %%), shipped %v", name, rows[0].EngineVersion, got, len(rows), 100*loss, shipped)
		if d := got - shipped; d > intakeStep || d < -intakeStep {
			t.Errorf("%s: families.yaml ships intake_us %v, the fit gives %v", name, shipped, got)
		}
	}
	t.Logf("fit wall time %v", time.Since(start).Round(time.Millisecond))
}

// The shipped per-engine defaults (with the front ends fitted on the
// older source) predict the newer sources whole: the medians of |error|
// over the held-out rows, per source (one publisher's measurement set),
// per family release and pooled, are pinned at what they measure now
// (docs/performance.md, "Held out by source"), so a change that worsens
// them fails here. They are not the targets (TTFT ≤ 20 %, TPOT ≤ 10 %,
// E2E ≤ 12 %): what each meets is in the docs. The fit source's residuals
// are logged, not pinned: they are not held out.
func TestRecentHeldOutBySource(t *testing.T) {
	fit, heldOut := splitRecent(t)
	fe, err := Evaluate(fit, FamilyEff)
	if err != nil {
		t.Fatal(err)
	}
	logRowErrors(t, fe)
	logMedians(t, "fitted (in source, "+recentFitSource+"…)", fe)
	he, err := Evaluate(heldOut, FamilyEff)
	if err != nil {
		t.Fatal(err)
	}
	logRowErrors(t, he)
	for _, g := range groupErrors(he, func(r PublicRow) string { return r.Engine + " " + r.EngineVersion }) {
		logMedians(t, "held out, "+g.name, g.errs)
	}
	groups := append(groupErrors(he, func(r PublicRow) string { return r.Source }), errGroup{"all", he})
	for _, g := range groups {
		a := logMedians(t, "held out, "+g.name, g.errs)
		pin, ok := heldOutPins[g.name]
		if !ok {
			t.Errorf("%s: a held-out source without pinned medians", g.name)
			continue
		}
		for _, c := range []struct {
			name     string
			got, pin float64
		}{{"TTFT", a.TTFT, pin.TTFT}, {"TPOT", a.TPOT, pin.TPOT}, {"E2E", a.E2E, pin.E2E}} {
			if math.IsNaN(c.pin) != math.IsNaN(c.got) || c.got > c.pin {
				t.Errorf("held out by source, %s: median |%s error| %.1f %%, pinned at ≤ %.1f %%", g.name, c.name, 100*c.got, 100*c.pin)
			}
		}
	}
}

// errGroup is the row errors of one source or release.
type errGroup struct {
	name string
	errs []RowError
}

// groupErrors splits errs by key, groups in name order.
func groupErrors(errs []RowError, key func(PublicRow) string) []errGroup {
	by := map[string][]RowError{}
	for _, e := range errs {
		by[key(e.Row)] = append(by[key(e.Row)], e)
	}
	out := make([]errGroup, 0, len(by))
	for k, v := range by {
		out = append(out, errGroup{k, v})
	}
	slices.SortFunc(out, func(a, b errGroup) int { return strings.Compare(a.name, b.name) })
	return out
}

// logRowErrors logs each row's prediction beside its measurement.
func logRowErrors(t *testing.T, errs []RowError) {
	t.Helper()
	for _, e := range errs {
		t.Logf("%-44s %s %-12s tp=%d c=%-3d TTFT %6.1f ms (measured %6.1f, %+5.0f%%)  TPOT %5.2f ms (%5.2f, %+5.0f%%)  E2E %6.0f ms (%6.0f, %+5.0f%%)",
			e.Row.ID, e.Row.Engine, e.Row.EngineVersion, e.Row.TP, e.Row.Concurrency, e.Pred.TTFT, e.Row.TTFT, 100*e.TTFT, e.Pred.TPOT, e.Row.TPOT, 100*e.TPOT, e.Pred.E2E, e.Row.E2E, 100*e.E2E)
	}
}

// logMedians logs and returns the medians of |error| over errs.
func logMedians(t *testing.T, name string, errs []RowError) Accuracy {
	t.Helper()
	all := Summarize(errs, 1)
	a := all[len(all)-1]
	t.Logf("%s (%d rows): median |error| TTFT %.1f %% (%d rows), TPOT %.1f %% (%d), E2E %.1f %% (%d)",
		name, a.NRows, 100*a.TTFT, a.NTTFT, 100*a.TPOT, a.NTPOT, 100*a.E2E, a.NE2E)
	return a
}

// heldOutPins are the held-out medians measured per source and pooled,
// rounded up (NaN: the source publishes no such figure). InferenceX issue
// #870 (12 rows: SGLang 0.5.7, DeepSeek-R1 FP8, 8 × H200, 8–64 clients of
// 1k/1k, and 4 clients of 1k/1k, 1k/8k and 8k/1k on other runners; and
// SGLang 0.5.6, DeepSeek-R1 NVFP4 on 8 × B200 at EP 8, 4–64 clients of
// 1k/1k, TTFT only), each run with its client's length spread and
// SGLang's steps as those releases run them — prompt work apart from
// decodes, prompt steps eager (families.yaml separate_prefill,
// sglang@0.5.7's eager_prefill; the front end refitted to none), the
// B200 rows with their recipe's --scheduler-recv-interval (10 below 16
// clients, 30 from 16: recent.csv recv_interval): TTFT 51.4 % (H200 rows
// 62.9 %, B200 rows 44.1 %; 75.6 % without the interval), TPOT 11.2 %, E2E 14.7 %
// (82.5 % / 78.4 % / 88.6 %, 15.4 %, 18.7 % with mixed, graph-replayed
// steps and a 1.3 ms front end). InferenceX issue #828 (vLLM 0.15.1,
// gpt-oss-120b MXFP4 on H100; 14 rows, no TTFT published: TP 8 at 4–64
// clients of 1k/1k and 1k/8k, 4 and 8 of 8k/1k, and TP 4 and 2 at 64
// clients of 1k/1k, TPOT only): TPOT 13.2 %, E2E 14.6 % — the twin's
// decode slower than measured by 8–27 % on every row but 1k/8k at 64
// clients, where the source's TPOT nearly triples (5.65 → 16.01 ms) and
// the twin's does not. InferenceX PR #3363 (SGLang 0.5.12, DeepSeek-R1
// FP8 on B200, TP 8 at 1–64 clients of 1k/1k, TP 4 and 8 at 1–2 of
// 8k/1k; 10 rows, TTFT and TPOT), with its recipe's recv interval (10,
// and 30 from 16 clients at TP 8) and its prompt steps apart, those
// over 2,048 tokens eager (piecewise prefill graphs, the default after
// 0.5.7, capture MLA steps up to 2,048 tokens), at its recipe's step
// budget (chunked_prefill): TTFT 54.4 % (70.7 % with
// every step graph-replayed, 86.8 % without the interval too), TPOT
// 20.6 % — the twin's TTFT 1.2–7 × short (137 ms at one client, where no
// interval applies), its decode 2–25 % fast, with the refitted front end.
// InferenceX PR #3317 (TensorRT-LLM 1.3.0rc14, the same model and GPU,
// TP 4 and 8 at 4–128 clients of 1k/1k and 4 of 8k/1k; 7 rows), its
// 64- and 128-client rows with the recipe's batch waiting (40 steps,
// 6,554 tokens): TTFT 61.9 % (70.2 % without), TPOT 11.9 %. Pooled (43
// rows): TTFT 60.9 % (29; 71.5 % without the recipes' recv intervals,
// batch waiting and SGLang's 2,048-token graphs), TPOT 16.2 % (38), E2E
// 14.7 % (19)
// (docs/performance.md, "Held out by source").
var heldOutPins = map[string]engine.Interval{
	"https://github.com/SemiAnalysisAI/InferenceX/issues/870": {TTFT: 0.52, TPOT: 0.12, E2E: 0.15},
	"https://github.com/SemiAnalysisAI/InferenceX/issues/828": {TTFT: math.NaN(), TPOT: 0.14, E2E: 0.15},
	"https://github.com/SemiAnalysisAI/InferenceX/pull/3363":  {TTFT: 0.55, TPOT: 0.21, E2E: math.NaN()},
	"https://github.com/SemiAnalysisAI/InferenceX/pull/3317":  {TTFT: 0.62, TPOT: 0.12, E2E: math.NaN()},
	"all": {TTFT: 0.61, TPOT: 0.17, E2E: 0.15},
}

// firstWaveSource is the held-out source that publishes each row's P99
// TTFT, which TestRecentHeldOutFirstWave reads.
const firstWaveSource = "https://github.com/SemiAnalysisAI/InferenceX/issues/870"

// heldOutP99TTFT is each of its rows' published P99 TTFT in ms (InferenceX
// issue #870's tables; recent.csv keeps the means).
var heldOutP99TTFT = map[string]float64{
	"inferencex-dsr1-fp8-h200-sglang-c8":      1975.4,
	"inferencex-dsr1-fp8-h200-sglang-c16":     2149.4,
	"inferencex-dsr1-fp8-h200-sglang-c32":     2644.1,
	"inferencex-dsr1-fp8-h200-sglang-c64":     2741.1,
	"inferencex-dsr1-fp8-h200-sglang-1k1k-c4": 835.0,
	"inferencex-dsr1-fp8-h200-sglang-1k8k-c4": 940.4,
	"inferencex-dsr1-fp8-h200-sglang-8k1k-c4": 1832.2,
	"inferencex-dsr1-fp4-b200-sglang-c4":      341.2,
	"inferencex-dsr1-fp4-b200-sglang-c8":      491.0,
	"inferencex-dsr1-fp4-b200-sglang-c16":     879.3,
	"inferencex-dsr1-fp4-b200-sglang-c32":     942.2,
	"inferencex-dsr1-fp4-b200-sglang-c64":     73198,
}

// Where the held-out TTFT gap lies (docs/performance.md, "Held out by
// source"): the source's client measures ten requests per client, the
// first of each client sent at once after its warm-up. If that first wave
// is what its P99 shows, the rest average (mean − P99 × c/N) / (1 − c/N);
// the twin's first wave and rest are logged beside it, each row run as
// Predict runs it (lengths drawn as the source's client drew them).
// Pinned: the twin has no stall of the first wave — its first wave
// averages under half the published P99 on every row whose P99 is at
// least three times its mean (a stall's shape: the H200 rows; the B200
// rows, P99 at most 2.5 × the mean, are logged), the mechanism the twin
// lacks, not a target.
func TestRecentHeldOutFirstWave(t *testing.T) {
	_, heldOut := splitRecent(t)
	for _, p := range heldOut {
		if p.Source != firstWaveSource {
			continue // the other held-out sources publish no P99 TTFT
		}
		p99, ok := heldOutP99TTFT[p.ID]
		if !ok {
			t.Fatalf("%s: no published P99 TTFT", p.ID)
		}
		eff, err := FamilyEff(p)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := EngineFor(p, eff)
		if err != nil {
			t.Fatal(err)
		}
		tls, err := RunClosedLoop(cfg, p.closedLoop(p.Requests, intakeOf(p)))
		if err != nil {
			t.Fatal(err)
		}
		ttfts := make([]float64, len(tls))
		var first, rest float64
		for i, tl := range tls {
			ttfts[i] = ms(tl.FirstToken.Sub(tl.Arrival))
			if i < p.Concurrency {
				first += ttfts[i]
			} else {
				rest += ttfts[i]
			}
		}
		c, n := float64(p.Concurrency), float64(len(tls))
		slices.Sort(ttfts)
		implied := (p.TTFT - p99*c/n) / (1 - c/n)
		t.Logf("%-40s measured mean %6.1f P99 %6.1f (rest if the first wave is the P99: %6.1f) | twin mean %6.1f P99 %6.1f first wave %6.1f rest %6.1f",
			p.ID, p.TTFT, p99, implied, (first+rest)/n, ttfts[int(0.99*(n-1))], first/c, rest/(n-c))
		if p99 >= 3*p.TTFT && first/c > p99/2 {
			t.Errorf("%s: the twin's first wave averages %.0f ms, over half the published P99 %.0f ms: docs/performance.md's account of the gap no longer holds", p.ID, first/c, p99)
		}
	}
}

// Every held-out recent row is predicted with the 80 % interval the
// shipped twin gives its case (engine.Envelope.Interval80, as simulate
// and estimate print it: the constants' in-source interval inside their
// envelope, the cross-source one outside, where the case is also
// flagged); the share of rows whose measurement lies inside is the
// intervals' coverage held out by source, per source and pooled. The fit
// source (GPUStack) is left out: its errors set the cross-source widths.
// Pinned at what it measures (docs/performance.md, "Intervals"; the
// target is ≥ 80 %).
func TestRecentIntervalsBySource(t *testing.T) {
	_, heldOut := splitRecent(t)
	errs, err := Evaluate(heldOut, FamilyEff)
	if err != nil {
		t.Fatal(err)
	}
	type tally struct{ in, n [3]int }
	by := map[string]*tally{"all": {}}
	for _, e := range errs {
		iv := rowInterval(t, e.Row)
		if by[e.Row.Source] == nil {
			by[e.Row.Source] = &tally{}
		}
		for i, m := range metrics {
			v, w := m.err(e), m.width(iv)
			if math.IsNaN(v) {
				continue
			}
			inside := math.Abs(v) <= w
			for _, k := range []string{e.Row.Source, "all"} {
				by[k].n[i]++
				if inside {
					by[k].in[i]++
				}
			}
			t.Logf("%-44s %s: error %+6.1f %%, interval ±%.1f %% (outside the envelope: %v), inside %v", e.Row.ID, m.name, 100*v, 100*w, iv.Outside, inside)
		}
	}
	keys := slices.Sorted(maps.Keys(by))
	for _, k := range keys {
		got := by[k]
		want, ok := intervalPins[k]
		if !ok {
			t.Errorf("%s: a held-out source without pinned coverage", k)
			continue
		}
		for i, m := range metrics {
			t.Logf("%s %s: %d of %d held-out rows inside the 80 %% interval", k, m.name, got.in[i], got.n[i])
			if [2]int{got.in[i], got.n[i]} != want[i] {
				t.Errorf("%s %s: %d of %d rows inside, pinned at %d of %d", k, m.name, got.in[i], got.n[i], want[i][0], want[i][1])
			}
		}
	}
}

// intervalPins are the held-out rows inside the 80 % interval and the
// rows publishing the metric (TTFT, TPOT, E2E), per source and pooled.
// Every held-out row lies outside the envelope (vllm and sglang ship no
// fitted constants; trtllm none for B200), so every one has the
// cross-source interval: TTFT ±549 % holds every row (an under-prediction
// is never more than 100 % off: the interval bounds TTFT below only, at
// prediction ÷ 6.5), TPOT ±15.2 % holds 18 of 38 (47 %), E2E ±15.6 % 11
// of 19 (58 %): the TPOT and E2E intervals are too narrow for these
// sources.
var intervalPins = map[string][3][2]int{
	"https://github.com/SemiAnalysisAI/InferenceX/issues/870": {{12, 12}, {4, 7}, {4, 7}},
	"https://github.com/SemiAnalysisAI/InferenceX/issues/828": {{0, 0}, {7, 14}, {7, 12}},
	"https://github.com/SemiAnalysisAI/InferenceX/pull/3363":  {{10, 10}, {3, 10}, {0, 0}},
	"https://github.com/SemiAnalysisAI/InferenceX/pull/3317":  {{7, 7}, {4, 7}, {0, 0}},
	"all": {{29, 29}, {18, 38}, {11, 19}},
}

// rowInterval is the 80 % interval the shipped twin gives r's case: its
// family at its release on its model, GPU, TP and weights
// (engine.Options.Envelope), for its lengths and clients; a case outside
// the envelope must be both flagged and given the cross-source interval.
func rowInterval(t *testing.T, r PublicRow) engine.Interval {
	t.Helper()
	fam, ok := engine.FamilyOf(r.Engine)
	if !ok {
		t.Fatalf("%s: engine %q of no family", r.ID, r.Engine)
	}
	o := engine.DefaultOptions()
	o.Engine, o.Model, o.GPU, o.TensorParallelSize, o.DType = fam.Name+"@"+r.EngineVersion, r.Model, r.GPU, r.TP, r.DType
	o, err := o.WithEngine(nil)
	if err != nil {
		t.Fatalf("%s: %v", r.ID, err)
	}
	env, err := o.Envelope()
	if err != nil {
		t.Fatalf("%s: %v", r.ID, err)
	}
	c := engine.EnvelopeCase{Input: [2]int{r.Input, r.Input}, Output: [2]int{r.Output, r.Output}, Concurrency: r.Concurrency}
	iv := env.Interval80(c)
	if flagged := len(env.Flags(c)) > 0; flagged != iv.Outside {
		t.Errorf("%s: flagged %v (%q) but the interval's outside is %v", r.ID, flagged, env.Flags(c), iv.Outside)
	}
	return iv
}
