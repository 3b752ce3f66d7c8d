package bench

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// tokenDoer answers on the fake clock: it notes each request's session in
// send order, brings its first token (the context's hook) at once unless
// silent, and ends 50 ms (fake) after it was sent.
type tokenDoer struct {
	clock  *fakeClock
	silent bool // never call the first-token hook: only the end starts the next worker

	mu    sync.Mutex
	order []int64
	ends  []int64 // sessions whose answer had ended when each request was sent
	done  []int64
}

func (d *tokenDoer) Do(ctx context.Context, req *workload.Request, rec *latency.Record) {
	d.mu.Lock()
	d.order = append(d.order, req.Session)
	d.ends = append(d.ends, int64(len(d.done)))
	d.mu.Unlock()
	rec.SentNS = int64(d.clock.Now())
	if f := firstTokenHook(ctx); f != nil && !d.silent {
		f()
	}
	time.Sleep(20 * time.Millisecond) // real time: the next worker starts meanwhile, or not
	rec.FirstTokenNS, rec.EndNS = rec.SentNS+10e6, rec.SentNS+50e6
	rec.OutputTokens = 2
	d.mu.Lock()
	d.done = append(d.done, req.Session)
	d.mu.Unlock()
}

// A first-token ramp-up starts the workers one after another in worker
// order: each once the previous worker's first answer brought its first
// token — while it is still in flight — or, when none came, once it ended.
func TestRampFirstTokenStartsWorkersInOrder(t *testing.T) {
	for _, silent := range []bool{false, true} {
		d := &tokenDoer{clock: &fakeClock{}, silent: silent}
		r := &Runner{Doer: d, Source: synth(1, 0), Clock: d.clock, RunID: "t", Emit: func(*latency.Record) {}}
		if _, err := r.Run(context.Background(), "p", workload.Load{Concurrency: 3, Requests: 3, RampFirstToken: true}); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]int64{0, 1, 2}, d.order); diff != "" && !silent {
			t.Errorf("silent=%t: sessions in send order (-want +got):\n%s", silent, diff)
		}
		// With the token, each is sent while the earlier ones are in flight;
		// without, the second once the first ended (the first worker, done,
		// may then take the third ticket itself).
		if !silent && !cmp.Equal([]int64{0, 0, 0}, d.ends) || silent && (d.order[0] != 0 || d.ends[1] != 1) {
			t.Errorf("silent=%t: answers ended before each send: %v", silent, d.ends)
		}
	}
}

// A ramp-up over a span starts worker k of N k/N of it after the phase
// starts, and its first request is meant for that instant.
func TestRampUpSpanSchedulesFirstRequests(t *testing.T) {
	clock, d := newFake(0, 20*time.Millisecond) // each request in flight until every worker took its ticket
	_, recs := runFake(t, context.Background(), clock, d, synth(1, 0),
		workload.Load{Concurrency: 4, Requests: 4, RampUp: 100 * time.Millisecond})
	var intended []int64
	for _, r := range recs {
		intended = append(intended, r.IntendedNS/1e6)
	}
	if diff := cmp.Diff([]int64{0, 25, 50, 75}, intended); diff != "" {
		t.Errorf("intended sends, ms (-want +got):\n%s", diff)
	}
}

// A first-token ramp-up whose run ends before every worker started (fewer
// requests than workers, or its duration) ends: a worker that finds no
// ticket lets the next one start, and find none.
func TestRampFirstTokenEndsWithFewerRequestsThanWorkers(t *testing.T) {
	d := &tokenDoer{clock: &fakeClock{}}
	r := &Runner{Doer: d, Source: synth(1, 0), Clock: d.clock, RunID: "t", Emit: func(*latency.Record) {}}
	done := make(chan error, 1)
	go func() {
		_, err := r.Run(context.Background(), "p", workload.Load{Concurrency: 8, Requests: 2, RampFirstToken: true})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil || len(d.order) != 2 {
			t.Errorf("error %v, %d requests sent; want 2", err, len(d.order))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not end: a worker waits for a start that never comes")
	}
}
