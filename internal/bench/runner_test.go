package bench

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// fakeClock jumps to the target of every sleep, waking late by Late: a
// sender that slept relative to its last wake-up would drift by Late per
// request; an absolute schedule does not.
type fakeClock struct {
	mu   sync.Mutex
	now  time.Duration
	Late time.Duration
	// settle, when set, runs before a sleep advances the clock: it waits
	// for the goroutines launched so far to read the clock.
	settle func(sleeps int64)
	sleeps atomic.Int64
}

func (c *fakeClock) Now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) SleepUntil(ctx context.Context, t time.Duration) error {
	if n := c.sleeps.Add(1); c.settle != nil {
		c.settle(n)
	}
	c.mu.Lock()
	if c.now < t {
		c.now = t + c.Late
	}
	c.mu.Unlock()
	return ctx.Err()
}

// fakeDoer answers every request instantly on the fake clock: first token
// 10 ms and end 20 ms after the send, two output tokens.
type fakeDoer struct {
	clock    *fakeClock
	hold     time.Duration // real time each request takes
	inflight atomic.Int32
	maxIn    atomic.Int32
	after    func(n int64)
	n        atomic.Int64
	started  atomic.Int64
}

// newFake returns a clock and a doer that only advance the clock once every
// request sent so far has read it.
func newFake(late, hold time.Duration) (*fakeClock, *fakeDoer) {
	d := &fakeDoer{hold: hold}
	d.clock = settlingClock(&d.started)
	d.clock.Late = late
	return d.clock, d
}

// settlingClock is a fake clock that advances only once every request sent
// so far has read it: started counts the requests that have.
func settlingClock(started *atomic.Int64) *fakeClock {
	return &fakeClock{settle: func(sleeps int64) {
		deadline := time.Now().Add(time.Second)
		for started.Load() < sleeps-1 && time.Now().Before(deadline) {
			runtime.Gosched()
		}
	}}
}

func (d *fakeDoer) Do(ctx context.Context, req *workload.Request, rec *latency.Record) {
	in := d.inflight.Add(1)
	defer d.inflight.Add(-1)
	for {
		m := d.maxIn.Load()
		if in <= m || d.maxIn.CompareAndSwap(m, in) {
			break
		}
	}
	rec.SentNS = int64(d.clock.Now())
	if d.after != nil {
		d.after(d.n.Add(1))
	}
	d.started.Add(1)
	if d.hold > 0 {
		time.Sleep(d.hold)
	}
	rec.FirstTokenNS, rec.EndNS = rec.SentNS+10e6, rec.SentNS+20e6
	rec.ChunkNS = []int64{rec.FirstTokenNS, rec.EndNS}
	rec.OutputTokens, rec.InputTokens = 2, req.InputTokens
}

func synth(turns int, think time.Duration) workload.Source {
	return &workload.Synthetic{Chat: true, Input: workload.Fixed(8), Output: workload.Fixed(2), Turns: turns, Think: think, Seed: 1}
}

func runFake(t *testing.T, ctx context.Context, clock *fakeClock, d *fakeDoer, src workload.Source, load workload.Load) (PhaseResult, []*latency.Record) {
	t.Helper()
	var recs []*latency.Record
	r := &Runner{Doer: d, Source: src, Clock: clock, RunID: "t", Emit: func(rec *latency.Record) { recs = append(recs, rec) }}
	res, err := r.Run(ctx, "p", load)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(recs, func(a, b *latency.Record) int {
		if a.IntendedNS != b.IntendedNS {
			return int(a.IntendedNS - b.IntendedNS)
		}
		x, _ := strconv.Atoi(strings.TrimPrefix(a.ID, "t-"))
		y, _ := strconv.Atoi(strings.TrimPrefix(b.ID, "t-"))
		return x - y
	})
	return res, recs
}

func TestOpenLoopScheduleIsAbsolute(t *testing.T) {
	clock, d := newFake(3*time.Millisecond, 0)
	res, recs := runFake(t, context.Background(), clock, d, synth(1, 0),
		workload.Load{Rate: 10, Arrival: workload.Constant, Requests: 5})
	var intended, sent []int64
	for _, r := range recs {
		intended, sent = append(intended, r.IntendedNS), append(sent, r.SentNS)
	}
	ms := func(xs ...int64) []int64 {
		for i := range xs {
			xs[i] *= 1e6
		}
		return xs
	}
	if diff := cmp.Diff(ms(0, 100, 200, 300, 400), intended); diff != "" {
		t.Errorf("intended (-want +got):\n%s", diff)
	}
	// Each send is 3 ms late, and lateness never accumulates.
	if diff := cmp.Diff(ms(0, 103, 203, 303, 403), sent); diff != "" {
		t.Errorf("sent (-want +got):\n%s", diff)
	}
	if res.Sent != 5 || res.SendLagMaxMS != 3 || res.SendLagP50MS != 3 {
		t.Errorf("result %+v", res)
	}
	// Achieved rate over the actual sends: 4 gaps over 403 ms.
	if want := 4 / 0.403; abs(res.AchievedRPS-want) > 1e-9 || abs(res.ScheduledRPS-10) > 1e-9 {
		t.Errorf("achieved %g scheduled %g", res.AchievedRPS, res.ScheduledRPS)
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

func TestWarmupAndDuration(t *testing.T) {
	clock, d := newFake(0, 0)
	_, recs := runFake(t, context.Background(), clock, d, synth(1, 0),
		workload.Load{Rate: 10, Arrival: workload.Constant, Requests: 3, WarmupRequests: 2})
	var warm []bool
	for _, r := range recs {
		warm = append(warm, r.Warmup)
	}
	if diff := cmp.Diff([]bool{true, true, false, false, false}, warm); diff != "" {
		t.Errorf("warm-up marks (-want +got):\n%s", diff)
	}
	clock, d = newFake(0, 0)
	res, recs := runFake(t, context.Background(), clock, d, synth(1, 0),
		workload.Load{Rate: 10, Arrival: workload.Constant, Duration: time.Second, WarmupDuration: 500 * time.Millisecond})
	if len(recs) != 15 || res.Warmup != 5 {
		t.Errorf("1.5 s at 10 req/s: %d records, %d warm-up; want 15 and 5", len(recs), res.Warmup)
	}
}

func TestClosedLoopKeepsConcurrency(t *testing.T) {
	clock, d := newFake(0, 2*time.Millisecond)
	res, recs := runFake(t, context.Background(), clock, d, synth(1, 0), workload.Load{Concurrency: 3, Requests: 12})
	if len(recs) != 12 || res.Mode != "closed" {
		t.Fatalf("%d records in mode %s", len(recs), res.Mode)
	}
	if m := d.maxIn.Load(); m != 3 {
		t.Errorf("max in flight %d, want 3", m)
	}
	for _, r := range recs {
		if r.ClientQueue() != 0 {
			t.Errorf("closed loop request %s queued %s in the client", r.ID, r.ClientQueue())
		}
	}
}

func TestRateWithCapQueuesInTheClient(t *testing.T) {
	// The clock runs free (no settling) and the first request holds the
	// cap until the schedule has passed 5 ms: the requests due meanwhile
	// wait for the cap in the client, and their sends come after their
	// intended instants.
	clock, d := newFake(0, 0)
	clock.settle = nil
	d.after = func(n int64) {
		if n != 1 {
			return
		}
		deadline := time.Now().Add(10 * time.Second)
		for clock.Now() < 5*time.Millisecond && time.Now().Before(deadline) {
			runtime.Gosched()
		}
	}
	_, recs := runFake(t, context.Background(), clock, d, synth(1, 0),
		workload.Load{Rate: 1000, Arrival: workload.Constant, Concurrency: 1, Requests: 20})
	if m := d.maxIn.Load(); m != 1 {
		t.Errorf("max in flight %d, want 1", m)
	}
	queued := 0
	for _, r := range recs {
		if r.ClientQueue() < 0 {
			t.Errorf("negative client queue %s", r.ClientQueue())
		}
		if r.ClientQueue() > 0 {
			queued++
		}
	}
	if queued == 0 {
		t.Error("no request waited for the cap; the intended time is not kept")
	}
}

func TestStopEndsSending(t *testing.T) {
	clock, d := newFake(0, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d.after = func(n int64) {
		if n == 3 {
			cancel()
		}
	}
	res, recs := runFake(t, ctx, clock, d, synth(1, 0), workload.Load{Rate: 100, Arrival: workload.Constant, Requests: 1000})
	if len(recs) < 3 || len(recs) > 5 || !res.Interrupted {
		t.Errorf("%d records after a stop at the 3rd (interrupted %v)", len(recs), res.Interrupted)
	}
}

func TestSessionsSendTurnsAfterThinkTime(t *testing.T) {
	clock, d := newFake(0, 0)
	one := func() workload.Arrivals { return &workload.AtOffsets{At: []time.Duration{0}} }
	_, recs := runFake(t, context.Background(), clock, d, synth(3, time.Second), workload.Load{Arrivals: one, Requests: 3})
	if len(recs) != 3 {
		t.Fatalf("%d records, want the 3 turns of one session", len(recs))
	}
	for i, r := range recs {
		if r.Turn != i+1 || r.Session != recs[0].Session {
			t.Errorf("record %d: session %d turn %d", i, r.Session, r.Turn)
		}
		if i > 0 && r.IntendedNS != recs[i-1].EndNS+1e9 {
			t.Errorf("turn %d intended %d, want previous end %d + 1 s", r.Turn, r.IntendedNS, recs[i-1].EndNS)
		}
		if i > 0 && r.InputTokens <= recs[i-1].InputTokens {
			t.Errorf("turn %d does not resend the history: %d tokens", r.Turn, r.InputTokens)
		}
	}
}

func TestLoadValidate(t *testing.T) {
	for _, l := range []workload.Load{
		{Rate: -1, Requests: 1},
		{Requests: 1},
		{Rate: 1},
		{Concurrency: -2, Requests: 1},
	} {
		if err := l.Validate(); err == nil {
			t.Errorf("%+v accepted", l)
		}
	}
}
