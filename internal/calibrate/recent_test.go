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
// over the held-out rows are pinned at what they measure now
// (docs/performance.md, "Held out by source"), so a change that worsens
// them fails here. They are not the targets (TTFT ≤ 20 %, TPOT ≤ 10 %,
// E2E ≤ 12 %): what each meets is in the docs. The fit source's residuals
// are logged, not pinned: they are not held out.
func TestRecentHeldOutBySource(t *testing.T) {
	fit, heldOut := splitRecent(t)
	for _, set := range []struct {
		name string
		rows []PublicRow
	}{{"fitted (in source)", fit}, {"held out by source", heldOut}} {
		errs, err := Evaluate(set.rows, FamilyEff)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range errs {
			t.Logf("%-40s %s %-12s c=%-3d TTFT %6.1f ms (measured %6.1f, %+5.0f%%)  TPOT %5.2f ms (%5.2f, %+5.0f%%)  E2E %6.0f ms (%6.0f, %+5.0f%%)",
				e.Row.ID, e.Row.Engine, e.Row.EngineVersion, e.Row.Concurrency, e.Pred.TTFT, e.Row.TTFT, 100*e.TTFT, e.Pred.TPOT, e.Row.TPOT, 100*e.TPOT, e.Pred.E2E, e.Row.E2E, 100*e.E2E)
		}
		all := Summarize(errs, 1)
		a := all[len(all)-1]
		t.Logf("%s (%d rows): median |error| TTFT %.1f %% (%d rows), TPOT %.1f %% (%d), E2E %.1f %% (%d)",
			set.name, a.NRows, 100*a.TTFT, a.NTTFT, 100*a.TPOT, a.NTPOT, 100*a.E2E, a.NE2E)
		if set.rows[0].Source != heldOut[0].Source {
			continue
		}
		for _, c := range []struct {
			name     string
			got, pin float64
		}{{"TTFT", a.TTFT, pinTTFT}, {"TPOT", a.TPOT, pinTPOT}, {"E2E", a.E2E, pinE2E}} {
			if math.IsNaN(c.got) || c.got > c.pin {
				t.Errorf("held out by source: median |%s error| %.1f %%, pinned at ≤ %.1f %%", c.name, 100*c.got, 100*c.pin)
			}
		}
	}
}

// The pins: the held-out medians measured on the held-out source's 7 rows
// (InferenceX: 8–64 clients of 1k/1k, and 4 clients of 1k/1k, 1k/8k and
// 8k/1k on other runners), each run with its client's length spread
// (input_min, output_min), the release's front end a delay every request
// takes (refitted so: SGLang 0.5's 1.3 ms): TTFT 78.4 %, TPOT 15.4 %,
// E2E 18.7 %, rounded up. The earlier ≤ 71 % TTFT priced the front end as
// a server taking one request at a time (SGLang's then 28.3 ms), which
// capped a simulated replica's rate at one per front end
// (docs/performance.md, "Held out by source").
const (
	pinTTFT = 0.79
	pinTPOT = 0.16
	pinE2E  = 0.19
)

// heldOutP99TTFT is each held-out row's published P99 TTFT in ms
// (InferenceX issue #870's tables; recent.csv keeps the means).
var heldOutP99TTFT = map[string]float64{
	"inferencex-dsr1-fp8-h200-sglang-c8":      1975.4,
	"inferencex-dsr1-fp8-h200-sglang-c16":     2149.4,
	"inferencex-dsr1-fp8-h200-sglang-c32":     2644.1,
	"inferencex-dsr1-fp8-h200-sglang-c64":     2741.1,
	"inferencex-dsr1-fp8-h200-sglang-1k1k-c4": 835.0,
	"inferencex-dsr1-fp8-h200-sglang-1k8k-c4": 940.4,
	"inferencex-dsr1-fp8-h200-sglang-8k1k-c4": 1832.2,
}

// Where the held-out TTFT gap lies (docs/performance.md, "Held out by
// source"): the source's client measures ten requests per client, the
// first of each client sent at once after its warm-up. If that first wave
// is what its P99 shows, the rest average (mean − P99 × c/N) / (1 − c/N);
// the twin's first wave and rest are logged beside it, each row run as
// Predict runs it (lengths drawn as the source's client drew them).
// Pinned: the twin has no stall of the first wave — its first wave
// averages under half the published P99 on every held-out row (the
// mechanism the twin lacks, not a target).
func TestRecentHeldOutFirstWave(t *testing.T) {
	_, heldOut := splitRecent(t)
	for _, p := range heldOut {
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
		if first/c > p99/2 {
			t.Errorf("%s: the twin's first wave averages %.0f ms, over half the published P99 %.0f ms: docs/performance.md's account of the gap no longer holds", p.ID, first/c, p99)
		}
	}
}
