package calibrate

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/results"
)

// truth is the set of deliberately non-default constants the recovery tests
// serve with (defaults on Hopper: compute 0.55, memory 0.80, step 1.5 ms).
var truth = perfmodel.Efficiency{Compute: 0.42, Memory: 0.66, Interconnect: 0.7, AllReduceLatency: 8 * time.Microsecond,
	StepOverhead: 2600 * time.Microsecond, LayerOverhead: 25 * time.Microsecond, SeqOverhead: 30 * time.Microsecond}

// syntheticWorkload simulates an open-loop workload with the true constants
// and returns it as measured records (server-side times and scheduling
// instants, as a server's metrics object gives them), for a recovery test
// without a wall clock.
func syntheticWorkload(t *testing.T, rate float64, n int, seed uint64) *results.Observations {
	t.Helper()
	m, _ := perfmodel.LookupModel("Llama-3.1-8B")
	g, _ := perfmodel.LookupGPU("H100-SXM")
	est, err := perfmodel.New(perfmodel.Config{Model: m, GPU: g, Eff: truth})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	var arr []engine.Arrival
	var at time.Duration
	for i := range n {
		at += time.Duration(rng.ExpFloat64() / rate * 1e9)
		arr = append(arr, engine.Arrival{At: at, Request: engine.Request{ID: "", PromptLen: 200 + rng.IntN(3000), MaxTokens: 16 + rng.IntN(64), IgnoreEOS: true}})
		_ = i
	}
	cfg := engine.FromEstimator(engine.Config{MaxModelLen: 8192}, est)
	res, err := engine.Simulate(cfg, arr, engine.SimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := &results.Observations{Dir: "synthetic"}
	for i, tl := range res.Timelines {
		w.Requests = append(w.Requests, results.Observed{Arrival: arr[i].At, Input: tl.PromptTokens, Output: tl.OutputTokens,
			TTFT: tl.FirstToken.Sub(tl.Arrival), Queue: tl.Scheduled.Sub(tl.Arrival), E2E: tl.Finished.Sub(tl.Arrival), ServerSide: true,
			Scheduled: tl.Scheduled.Sub(engine.SimEpoch), Anchored: true})
	}
	return w
}

func within(t *testing.T, name string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol*want {
		t.Errorf("%s: recovered %.4g, truth %.4g (%+.1f%%, allowed ±%.0f%%)", name, got, want, 100*(got-want)/want, 100*tol)
	} else {
		t.Logf("%s: recovered %.4g, truth %.4g (%+.2f%%)", name, got, want, 100*(got-want)/want)
	}
}

// recoversTruth checks the four constants the recovery tests fit (compute
// and memory efficiency, step and per-sequence overhead) against truth's,
// each within tol.
func recoversTruth(t *testing.T, c perfmodel.ProfileConstants, tol float64) {
	t.Helper()
	within(t, "compute", c.Compute.Value, truth.Compute, tol)
	within(t, "memory", c.Memory.Value, truth.Memory, tol)
	within(t, "step overhead", c.StepOverheadUS.Value, float64(truth.StepOverhead)/1e3, tol)
	within(t, "sequence overhead", c.SeqOverheadUS.Value, float64(truth.SeqOverhead)/1e3, tol)
}

func TestCalibrateRecoversVirtual(t *testing.T) {
	w := results.Merge(syntheticWorkload(t, 4, 80, 1), syntheticWorkload(t, 14, 120, 2))
	res, err := Calibrate(context.Background(), w, Config{Engine: engine.DefaultOptions(), Bootstrap: 4})
	if err != nil {
		t.Fatal(err)
	}
	recoversTruth(t, res.Profile.Constants, 0.05)
	t.Logf("evaluations %d, residuals %+v, before %+v, range %+v", res.Evaluations, res.Profile.Residuals, res.Before, res.Profile.Range)
}

// fitWarnings names a fraction at its cap, a tail the fit made worse,
// and two constants the resamples moved together; a clean fit has none.
func TestFitWarnings(t *testing.T) {
	eff := perfmodel.Efficiency{Compute: 1, Memory: 0.7, StepOverhead: 300 * time.Microsecond, SeqOverhead: 10 * time.Microsecond}
	ridge := [][]float64{{0.1, 0.2, 0.3, 0.4}, {-0.1, -0.2, -0.31, -0.4}, {0.3, -0.2, 0.1, 0}, {0, 0.1, -0.1, 0.05}}
	before := map[string]perfmodel.Residual{"ttft": {P50: 0.2, P90: 0.1, P99: 0.1}, "tpot": {P50: 0.1, P90: 0.1, P99: 0.1}}
	after := map[string]perfmodel.Residual{"ttft": {P50: 0.02, P90: 0.05, P99: 0.3}, "tpot": {P50: 0.01, P90: 0.02, P99: 0.05}}
	got := fitWarnings(eff, ridge, before, after)
	want := []string{"compute efficiency sits at its cap of 1", "TTFT P99: the fitted constants predict it worse than the starting ones (30.0 % vs 10.0 % off)",
		"the data could not separate compute efficiency and memory efficiency (bootstrap correlation -1.00)"}
	if len(got) != len(want) {
		t.Fatalf("warnings %q, want %d", got, len(want))
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("warning %d = %q, want it to say %q", i, got[i], want[i])
		}
	}
	eff.Compute = 0.6
	clean := [][]float64{{0.1, 0.2, 0.3, 0.4}, {0.1, -0.2, 0.3, -0.4}, {0.3, -0.2, 0.1, 0}, {0, 0.1, -0.1, 0.05}}
	if got := fitWarnings(eff, clean, after, after); len(got) != 0 {
		t.Errorf("a clean fit warns: %q", got)
	}
	// Pinned constants (resamples within a thousandth of a percent) are
	// separated, however their jitter correlates.
	pinned := [][]float64{{1e-5, 2e-5, 3e-5, 4e-5}, {1e-5, 2e-5, 3e-5, 4e-5}, {0.3, -0.2, 0.1, 0}, {0, 0.1, -0.1, 0.05}}
	if got := fitWarnings(eff, pinned, after, after); len(got) != 0 {
		t.Errorf("pinned constants warn: %q", got)
	}
}
