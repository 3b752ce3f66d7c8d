package simulate_test

import (
	"context"
	"io"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/bench"
	"github.com/tokentrace/tokentrace/internal/racedetect"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/serve"
	"github.com/tokentrace/tokentrace/internal/simulate"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// maxReferenceLag is the send lag P99 (ms) past which bench's wall-clock
// run is no reference: the process got the CPU too rarely to keep time.
const maxReferenceLag = 50

func p50(t *testing.T, rep *report.Report, metric string) float64 {
	t.Helper()
	for _, d := range rep.Metrics {
		if d.Metric == metric {
			return d.P50
		}
	}
	t.Fatalf("no %s in the report", metric)
	return 0
}

// TestAgreesWithBenchAgainstTheEngine runs one open-loop workload twice:
// through bench against the in-process engine on the wall clock (HTTP,
// SSE, the real client), and through simulate on the virtual clock. The
// scheduler and performance model are the same code, so the medians must
// agree. The engines' own split (server queue + prefill) is compared
// always (within 20 %, or 50 % when bench doubts its own run on a busy
// machine); the client's TTFT, TPOT and E2E when bench found the machine
// fit to keep its schedule, with a tolerance for what only the wall-clock
// run has: the loopback HTTP round trip, tokenization and SSE framing (its
// measured network stage, about a millisecond).
func TestAgreesWithBenchAgainstTheEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs bench in real time for about 6 s")
	}
	if racedetect.Enabled {
		t.Skip("the race detector slows the wall-clock client and server several-fold; the comparison would measure it")
	}
	wl := workload.DefaultOptions()
	wl.Rate, wl.Requests, wl.InputTokens, wl.OutputTokens = 10, 50, "uniform:200-1200", "uniform:20-60"
	given := func(f string) bool { return f == "rate" || f == "requests" }
	dir := t.TempDir()

	_, bres := benchAgainstServe(t, wl, given, serve.DefaultOptions(), filepath.Join(dir, "bench"))

	t.Logf("bench: send lag P99 %.2f ms, CPU %.0f%%, warnings %q", bres.Summary.Client.SendLagP99MS, 100*bres.Summary.Client.CPUUtil, bres.Summary.Client.Warnings)

	so := simulate.DefaultOptions()
	so.Workload, so.OutputDir = wl, filepath.Join(dir, "sim")
	so.Engine.Seed = 0 // bench's embedded engine's
	cfg, out, err := so.Config(given, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sum, err := simulate.WriteRun(cfg, out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}

	// The engines' own view: queue + prefill, each run's server split. On a
	// machine so busy that bench doubts its own schedule, the wall-clock
	// engine's step loop falls behind too (past 20 ms it restarts from the
	// current time), which shifts its instants: only a gross disagreement
	// is then an error.
	if lag := bres.Summary.Client.SendLagP99MS; lag > maxReferenceLag {
		t.Skipf("the machine is too busy to run the wall-clock reference: bench's own send lag P99 is %.0f ms (over %d ms)", lag, maxReferenceLag)
	}
	doubted := len(bres.Summary.Client.Warnings) > 0
	rel := 0.2
	if doubted {
		rel = 0.5
	}
	bs := p50(t, bres.Report, "server_queue") + p50(t, bres.Report, "prefill")
	ss := p50(t, sum.Report, "server_queue") + p50(t, sum.Report, "prefill")
	t.Logf("server queue + prefill P50: bench %.2f ms, simulate %.2f ms", bs, ss)
	if d := math.Abs(bs - ss); d > 2 && d > rel*ss {
		t.Errorf("server queue + prefill P50: bench %.2f ms, simulate %.2f ms: apart by more than 2 ms and %.0f%%", bs, ss, 100*rel)
	}
	// The client's view, allowing the wall-clock run its measured network
	// stage (loopback HTTP, tokenization, SSE and scheduling delays). On a
	// machine too busy to keep bench's own schedule (bench then warns of
	// its send lag or CPU), wall-clock lateness reaches the client's
	// numbers and the comparison would measure the machine, not the twin.
	if doubted {
		t.Logf("client-side medians not compared: bench doubts its own run on this machine now: %q", bres.Summary.Client.Warnings)
		return
	}
	network := p50(t, bres.Report, "network")
	for _, m := range []struct {
		metric          string
		absMS, relative float64
	}{
		{"ttft", 3 + network, 0.25},
		{"tpot", 0.5, 0.15},
		{"e2e", 5 + network, 0.10},
	} {
		b, s := p50(t, bres.Report, m.metric), p50(t, sum.Report, m.metric)
		t.Logf("%s P50: bench %.2f ms, simulate %.2f ms (bench's network stage P50 %.2f ms)", m.metric, b, s, network)
		if d := math.Abs(b - s); d > m.absMS && d > m.relative*s {
			t.Errorf("%s P50: bench %.2f ms, simulate %.2f ms: apart by more than %.1f ms and %.0f%%", m.metric, b, s, m.absMS, 100*m.relative)
		}
	}
}

// benchAgainstServe runs bench with the workload wl (given says which of
// its flags were set) against serve started with so, writing its results
// folder to out.
func benchAgainstServe(t *testing.T, wl workload.Options, given func(string) bool, so serve.Options, out string) (bench.Options, *bench.Result) {
	t.Helper()
	bo := bench.DefaultOptions()
	bo.Workload, bo.OutputDir, bo.NoCalibration = wl, out, true
	bcfg, err := bo.Config(given, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	scfg, err := so.Config()
	if err != nil {
		t.Fatal(err)
	}
	bcfg.StartEmbedded = func(ctx context.Context) (*bench.Embedded, error) {
		srv, err := serve.Start(ctx, scfg, "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		return &bench.Embedded{URL: srv.URL(), Close: srv.Close}, nil
	}
	bres, err := bench.Run(context.Background(), bcfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return bo, bres
}
