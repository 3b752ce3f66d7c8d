package calibrate

import (
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
// sglang@0.5.7's eager_prefill; the front end refitted to none): TTFT
// 62.9 % (H200 rows 62.9 %, B200 rows 75.6 %), TPOT 11.2 %, E2E 14.7 %
// (82.5 % / 78.4 % / 88.6 %, 15.4 %, 18.7 % with mixed, graph-replayed
// steps and a 1.3 ms front end). InferenceX issue #828 (vLLM 0.15.1,
// gpt-oss-120b MXFP4 on H100; 14 rows, no TTFT published: TP 8 at 4–64
// clients of 1k/1k and 1k/8k, 4 and 8 of 8k/1k, and TP 4 and 2 at 64
// clients of 1k/1k, TPOT only): TPOT 13.2 %, E2E 14.6 % — the twin's
// decode slower than measured by 8–27 % on every row but 1k/8k at 64
// clients, where the source's TPOT nearly triples (5.65 → 16.01 ms) and
// the twin's does not. InferenceX PR #3363 (SGLang 0.5.12, DeepSeek-R1
// FP8 on B200, TP 8 at 1–64 clients of 1k/1k, TP 4 and 8 at 1–2 of
// 8k/1k; 10 rows, TTFT and TPOT): TTFT 86.8 %, TPOT 20.5 % — the twin's
// TTFT 3–21 × short, its decode 2–25 % fast; its prompt steps apart, not
// eager (a release after piecewise prefill graphs became the default),
// with the refitted front end (84.8 / 21.0 % with mixed steps and 1.3 ms).
// InferenceX PR #3317 (TensorRT-LLM 1.3.0rc14, the same model and GPU,
// TP 4 and 8 at 4–128 clients of 1k/1k and 4 of 8k/1k; 7 rows): TTFT
// 70.2 %, TPOT 11.9 %. Pooled (43 rows): TTFT 71.5 % (29), TPOT 16.2 %
// (38), E2E 14.7 % (19) (docs/performance.md, "Held out by source").
var heldOutPins = map[string]engine.Interval{
	"https://github.com/SemiAnalysisAI/InferenceX/issues/870": {TTFT: 0.63, TPOT: 0.12, E2E: 0.15},
	"https://github.com/SemiAnalysisAI/InferenceX/issues/828": {TTFT: math.NaN(), TPOT: 0.14, E2E: 0.15},
	"https://github.com/SemiAnalysisAI/InferenceX/pull/3363":  {TTFT: 0.87, TPOT: 0.21, E2E: math.NaN()},
	"https://github.com/SemiAnalysisAI/InferenceX/pull/3317":  {TTFT: 0.71, TPOT: 0.12, E2E: math.NaN()},
	"all": {TTFT: 0.72, TPOT: 0.17, E2E: 0.15},
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

// The 80 % intervals a family ships are its constants' fit residuals on
// one source (trtllm's: the 2024 NIM rows of loaded.csv, TestFamilyIntervals);
// every row of recent.csv that such an interval covers (its family ships
// constants with an interval for its GPU and weight precision) is another
// source's, so the share inside is coverage by source. TTFT is left out
// on the front-end fit source's rows: it is what their front end was
// fitted to. Pinned at what it measures (docs/performance.md, "Intervals"):
// one row has an interval today, GPUStack's TensorRT-LLM 1.2.0rc1 row
// (Qwen3-8B on H100, trtllm's H100 16-bit interval: TPOT ±9.8 %, E2E
// ±9.1 %), TPOT +9.5 % inside and E2E +9.2 % outside — too few rows to
// judge the ≥ 80 % target.
func TestRecentIntervalsBySource(t *testing.T) {
	rows, err := LoadPublic(recentRows)
	if err != nil {
		t.Fatal(err)
	}
	in, n := map[string]int{}, map[string]int{}
	for _, r := range rows {
		iv, ok := shippedInterval(t, r)
		if !ok {
			continue
		}
		errs, err := Evaluate([]PublicRow{r}, FamilyEff)
		if err != nil {
			t.Fatal(err)
		}
		e := errs[0]
		for _, m := range []struct {
			name       string
			err, width float64
		}{{"ttft", e.TTFT, iv.TTFT}, {"tpot", e.TPOT, iv.TPOT}, {"e2e", e.E2E, iv.E2E}} {
			if math.IsNaN(m.err) || m.width == 0 || (m.name == "ttft" && strings.HasPrefix(r.Source, recentFitSource)) {
				continue
			}
			n[m.name]++
			inside := math.Abs(m.err) <= m.width
			if inside {
				in[m.name]++
			}
			t.Logf("%s %s: error %+.1f %%, interval ±%.1f %%, inside %v", r.ID, m.name, 100*m.err, 100*m.width, inside)
		}
	}
	want := map[string][2]int{"tpot": {1, 1}, "e2e": {0, 1}}
	for _, m := range []string{"ttft", "tpot", "e2e"} {
		t.Logf("%s: %d of %d rows of other sources inside the 80 %% interval", m, in[m], n[m])
		if got := [2]int{in[m], n[m]}; got != want[m] {
			t.Errorf("%s: %d of %d rows inside the 80 %% interval, pinned at %d of %d", m, in[m], n[m], want[m][0], want[m][1])
		}
	}
}

// shippedInterval is the 80 % interval the constants r's family ships for
// its GPU and weight precision carry (as engine.Family.ConstantsFor picks
// them: the precision's own, else the GPU's unqualified ones).
func shippedInterval(t *testing.T, r PublicRow) (engine.Interval, bool) {
	t.Helper()
	fam, ok := engine.FamilyOf(r.Engine)
	if !ok {
		return engine.Interval{}, false
	}
	var found *engine.FamilyConstant
	for i, c := range fam.Constants {
		if !strings.EqualFold(c.GPU, r.GPU) {
			continue
		}
		if c.DType != "" && strings.EqualFold(c.DType, r.DType) {
			found = &fam.Constants[i]
			break
		}
		if c.DType == "" && found == nil {
			found = &fam.Constants[i]
		}
	}
	if found == nil {
		return engine.Interval{}, false
	}
	iv := found.Envelope.Interval80
	return iv, iv.TTFT+iv.TPOT+iv.E2E > 0
}
