package bench

import (
	"context"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// rateDoer answers on the fake clock with a TTFT that depends on the
// phase's rate: fast up to edge, slow above it; above failAbove it fails.
type rateDoer struct {
	clock     *fakeClock
	edge      float64
	failAbove float64
	started   atomic.Int64
}

// newRateDoer returns a fake clock that advances only once every request
// sent so far has read it, and a rateDoer on it.
func newRateDoer(edge, failAbove float64) (*fakeClock, *rateDoer) {
	d := &rateDoer{edge: edge, failAbove: failAbove}
	d.clock = settlingClock(&d.started)
	return d.clock, d
}

func (d *rateDoer) Do(_ context.Context, req *workload.Request, rec *latency.Record) {
	rate, _ := strconv.ParseFloat(strings.SplitN(strings.TrimPrefix(rec.Phase, "rate="), "#", 2)[0], 64)
	rec.SentNS = int64(d.clock.Now())
	defer d.started.Add(1)
	if d.failAbove > 0 && rate > d.failAbove {
		rec.ErrorKind, rec.Error = latency.FailHTTP5xx, "overloaded"
		return
	}
	ttft := int64(10e6)
	if rate > d.edge {
		ttft = 100e6
	}
	rec.FirstTokenNS, rec.EndNS = rec.SentNS+ttft, rec.SentNS+ttft+10e6
	rec.ChunkNS = []int64{rec.FirstTokenNS, rec.EndNS}
	rec.OutputTokens = 2
}

func sweepRun(t *testing.T, d *rateDoer, clock *fakeClock, sw *Sweep, slos string) *SweepOutcome {
	t.Helper()
	cfg := Config{Load: workload.Load{Rate: 1, Arrival: workload.Constant, Requests: 20}, Sweep: sw, SLOs: mustSLOs(t, slos)}
	r := &Runner{Doer: d, Source: synth(1, 0), Clock: clock, RunID: "s", Emit: func(*latency.Record) {}}
	var phases []PhaseResult
	out, err := runSweep(context.Background(), r, cfg, nil, io.Discard, &phases)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCapacitySearchBisects(t *testing.T) {
	clock, d := newRateDoer(7.3, 0)
	out := sweepRun(t, d, clock, &Sweep{Kind: "rate", Auto: true, Start: 1}, "ttft:p99<=50ms")
	if out.Capacity > 7.3 || out.Capacity < 7.3*0.95 || out.FailsAt <= 7.3 || (out.FailsAt-out.Capacity)/out.FailsAt > 0.05 {
		t.Errorf("capacity %g, fails at %g; want the edge 7.3 bracketed within 5%%", out.Capacity, out.FailsAt)
	}
	if !strings.HasPrefix(out.Line, "capacity: ") || !strings.Contains(out.Line, "ttft:p99<=50ms") {
		t.Errorf("line %q", out.Line)
	}
	// The answer was repeated twice.
	n := 0
	for _, p := range out.Points {
		if p.Rate == out.Capacity {
			n++
		}
	}
	if n < 3 {
		t.Errorf("the answer %g was run %d times, want 1 + 2 repeats", out.Capacity, n)
	}
	// Doubling from 1: 1, 2, 4, 8 (fails), then bisection.
	var first []float64
	for _, p := range out.Points[:4] {
		first = append(first, p.Rate)
	}
	if diff := cmp.Diff([]float64{1, 2, 4, 8}, first); diff != "" {
		t.Errorf("bracketing (-want +got):\n%s", diff)
	}
}

func TestSaturationSweep(t *testing.T) {
	clock, d := newRateDoer(1e9, 20)
	out := sweepRun(t, d, clock, &Sweep{Kind: "rate", Auto: true, Start: 1, Points: 4}, "")
	if out.Saturation != 16 {
		t.Fatalf("saturation %g, want 16 (32 fails)", out.Saturation)
	}
	var spread []float64
	for _, p := range out.Points[len(out.Points)-4:] {
		spread = append(spread, p.Rate)
	}
	if diff := cmp.Diff([]float64{4, 8, 12, 16}, spread); diff != "" {
		t.Errorf("points below saturation (-want +got):\n%s", diff)
	}
}

func TestParseSweep(t *testing.T) {
	s, err := ParseSweep("5, 10,20", "rate")
	if err != nil || !cmp.Equal(s.Values, []float64{5, 10, 20}) {
		t.Errorf("%+v %v", s, err)
	}
	for _, bad := range []string{"x", "1,-2", "0"} {
		if _, err := ParseSweep(bad, "rate"); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := ParseSweep("1.5", "concurrency"); err == nil {
		t.Error("fractional concurrency accepted")
	}
}

// TestSweepMinSpan: a rate point sends for at least MinSpan, so 20
// requests at 8 req/s with a 5 s span become 40, and at 2 req/s stay 20
// (they already span 10 s).
func TestSweepMinSpan(t *testing.T) {
	clock, d := newRateDoer(100, 0)
	cfg := Config{Load: workload.Load{Rate: 1, Arrival: workload.Constant, Requests: 20},
		Sweep: &Sweep{Kind: "rate", Values: []float64{2, 8}, MinSpan: 5 * time.Second}}
	r := &Runner{Doer: d, Source: synth(1, 0), Clock: clock, RunID: "s", Emit: func(*latency.Record) {}}
	var phases []PhaseResult
	if _, err := runSweep(context.Background(), r, cfg, nil, io.Discard, &phases); err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, p := range phases {
		got = append(got, p.Sent)
	}
	if diff := cmp.Diff([]int{20, 40}, got); diff != "" {
		t.Errorf("requests per point (-want +got):\n%s", diff)
	}
}
