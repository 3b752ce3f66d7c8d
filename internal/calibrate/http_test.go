package calibrate

import (
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/bench"
	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/serve"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// keepRecords keeps the HTTP-path recovery test's bench results, to rerun
// the fit on them without the server.
var keepRecords = flag.String("calibrate-http-records", "", "reuse (or write) the HTTP-path recovery test's bench results in this folder")

// httpRecords serves with the truth's constants (loaded with --profile's
// option) and benches the server over HTTP under two loads, returning the
// results folders.
func httpRecords(t *testing.T) []string {
	t.Helper()
	dir := *keepRecords
	if dir == "" {
		dir = t.TempDir()
	}
	runs := []string{filepath.Join(dir, "low"), filepath.Join(dir, "high")}
	if _, err := os.Stat(runs[1]); err == nil {
		return runs
	}
	prof := &perfmodel.Profile{Schema: perfmodel.ProfileSchema, Model: "Llama-3.1-8B", GPU: "H100-SXM", TP: 1, DType: "bf16", KVDType: "bf16",
		Constants: perfmodel.ProfileFromEfficiency(truth), Range: perfmodel.FitRange{BatchMin: 1, BatchMax: 1, InputMin: 1, InputMax: 1, OutputMin: 1, OutputMax: 1}}
	truthFile := filepath.Join(t.TempDir(), "truth.yaml")
	if err := prof.WriteFile(truthFile); err != nil {
		t.Fatal(err)
	}
	opts := serve.DefaultOptions()
	opts.Engine.Profile = truthFile
	scfg, err := opts.Config()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := serve.Start(context.Background(), scfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for i, load := range []workload.Load{
		{Rate: 6, Arrival: workload.Poisson, Requests: 24, Seed: 1},
		{Rate: 16, Arrival: workload.Poisson, Requests: 48, Seed: 2},
	} {
		cfg := bench.Config{
			Target: bench.Target{BaseURL: srv.URL(), Endpoint: bench.EndpointChat, Stream: true, IgnoreEOS: true,
				ContinuousUsage: true, ServerMetrics: bench.ServerMetricsTokentrace, Timeout: time.Minute},
			Workload: &workload.Synthetic{Chat: true, Input: workload.Uniform{Lo: 200, Hi: 3000}, Output: workload.Uniform{Lo: 16, Hi: 48}, Turns: 1, Seed: uint64(7 + i)},
			Load:     load, OutDir: runs[i], Command: []string{"tokentrace", "bench", "(test)"}, SkipCalibration: true,
		}
		if _, err := bench.Run(context.Background(), cfg, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	return runs
}

// TestCalibrateRecoversThroughHTTP is the proof of calibration without a
// GPU: serve runs on the wall clock with deliberately non-default
// constants (the truth, loaded with --profile), bench measures it over HTTP
// under two loads (asking for the per-request metrics object, as
// --server-metrics tokentrace does), and calibration from those records, starting
// from the defaults, recovers every fitted constant within 5 % and
// predicts the median TTFT and TPOT within 3 %.
//
// What makes it exact: the replay is anchored on the server's own
// scheduling instants (replayAnchored), and the served engine keeps its
// step schedule through host stalls (engine.maxLag), so a loaded machine
// delays the tokens' delivery, not the server's timings.
func TestCalibrateRecoversThroughHTTP(t *testing.T) {
	var ws []*results.Observations
	for _, dir := range httpRecords(t) {
		w, err := results.ReadObserved(dir)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	w := results.Merge(ws...)
	if p, err := newProblem(w, Config{Engine: engine.DefaultOptions()}); err == nil {
		_, rp, _ := p.simulate(truth)
		t.Logf("anchored %v; at the truth, as fitted: %+v", p.anchored, residualsOf(p, rp))
		pr, _ := p.predict(truth)
		t.Logf("at the truth, predicted: %+v", residuals(p.obs, pr.timelines))
	}
	res, err := Calibrate(context.Background(), w, Config{Engine: engine.DefaultOptions(), Bootstrap: 4, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	recoversTruth(t, res.Profile.Constants, 0.05)
	for _, m := range []string{"ttft", "tpot"} {
		if r := res.Profile.Residuals[m]; r.P50 > 0.03 {
			t.Errorf("%s: median |error| after the fit %.1f%%, want ≤ 3%%", m, 100*r.P50)
		}
	}
	t.Logf("residuals %+v (before %+v), %d evaluations", res.Profile.Residuals, res.Before, res.Evaluations)
}

// residualsOf are the residuals of a replay as the fit sees it.
func residualsOf(p *problem, rp replay) map[string]perfmodel.Residual {
	tls := make([]engine.Timeline, len(rp.timelines))
	for i, tl := range rp.timelines {
		ttft, e2e, _ := p.times(p.obs[i], tl)
		tl.Arrival = tl.FirstToken.Add(-ttft)
		tl.Finished = tl.Arrival.Add(e2e)
		tls[i] = tl
	}
	return residuals(p.obs, tls)
}
