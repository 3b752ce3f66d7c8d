package app

import (
	"context"
	"io"
	"runtime"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/tracing"
)

// Clock is the application's time: Now for every instant it measures,
// Sleep for the delays it stands in for (a remote store's latency, a
// classifier's cost).
type Clock interface {
	Now() time.Time
	Sleep(ctx context.Context, d time.Duration) error
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// spinBelow is how close to its end a wait stops sleeping on a timer and
// yields in a loop instead: timers fire up to a millisecond or more late on
// a busy machine, which would inflate a per-token cost of 100 µs tenfold.
const spinBelow = time.Millisecond

func (wallClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	end := time.Now().Add(d)
	if d > spinBelow {
		t := time.NewTimer(d - spinBelow)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	for time.Now().Before(end) {
		if err := ctx.Err(); err != nil {
			return err
		}
		runtime.Gosched()
	}
	return nil
}

// timeline is one request's instants and accumulated durations. The
// stages before the upstream call are contiguous intervals; after it the
// application alternates between waiting on upstream, checking, its own
// work and writing, so those are sums (docs/metrics.md, "Application
// stages").
type timeline struct {
	start     time.Time // handler entered
	parsed    time.Time // request read and decoded
	retrieved time.Time // every retrieval call returned
	reranked  time.Time
	prompted  time.Time // prompt assembled, upstream request about to be sent
	end       time.Time // last byte written

	upstream, guardrail, backpressure time.Duration
}

// stages are the partition of one request's time in the application.
type stages struct {
	In, Retrieval, Rerank, Prompt, Upstream, Guardrail, Post, Backpressure time.Duration
}

// stages computes the partition: instants not reached collapse onto the
// last one reached, and post_process is what is left of the time after the
// prompt, so the stages sum exactly to end − start.
func (t *timeline) stages() stages {
	d := latency.Consecutive(t.start, t.parsed, t.retrieved, t.reranked, t.prompted, t.end)
	s := stages{In: d[0], Retrieval: d[1], Rerank: d[2], Prompt: d[3]}
	tail := d[4]
	s.Upstream, s.Guardrail, s.Backpressure = t.upstream, t.guardrail, t.backpressure
	// Measured sub-intervals cannot exceed the tail; should a clock say
	// otherwise, trim the last measured first to keep the partition exact.
	for _, d := range []*time.Duration{&s.Backpressure, &s.Guardrail, &s.Upstream} {
		if over := s.Upstream + s.Guardrail + s.Backpressure - tail; over > 0 {
			*d -= min(over, *d)
		}
	}
	s.Post = tail - s.Upstream - s.Guardrail - s.Backpressure
	return s
}

func (s stages) sum() time.Duration {
	return s.In + s.Retrieval + s.Rerank + s.Prompt + s.Upstream + s.Guardrail + s.Post + s.Backpressure
}

// headerTiming is the Server-Timing header: the stages known before the
// answer's first byte.
func (s stages) headerTiming() string {
	var b []byte
	b = latency.AppendTiming(b, latency.TimingAppIn, int64(s.In))
	b = latency.AppendTiming(b, latency.TimingAppRetrieval, int64(s.Retrieval))
	b = latency.AppendTiming(b, latency.TimingAppRerank, int64(s.Rerank))
	b = latency.AppendTiming(b, latency.TimingAppPrompt, int64(s.Prompt))
	return string(b)
}

// finalTiming is the trailer and the final SSE comment: the stages after
// the upstream call, the total, then the upstream's own stages passed on.
func (s stages) finalTiming(forward string) string {
	var b []byte
	b = latency.AppendTiming(b, latency.TimingAppUpstream, int64(s.Upstream))
	b = latency.AppendTiming(b, latency.TimingAppGuardrail, int64(s.Guardrail))
	b = latency.AppendTiming(b, latency.TimingAppPostProcess, int64(s.Post))
	b = latency.AppendTiming(b, latency.TimingAppBackpressure, int64(s.Backpressure))
	b = latency.AppendTiming(b, latency.TimingAppTotal, int64(s.sum()))
	if forward != "" {
		b = append(b, ", "...)
		b = append(b, forward...)
	}
	return string(b)
}

// spans are the stages as tracing lays them out, in path order.
func (s stages) spans() []tracing.Stage {
	return []tracing.Stage{
		{Name: latency.TimingAppIn, D: s.In}, {Name: latency.TimingAppRetrieval, D: s.Retrieval},
		{Name: latency.TimingAppRerank, D: s.Rerank}, {Name: latency.TimingAppPrompt, D: s.Prompt},
		{Name: latency.TimingAppUpstream, D: s.Upstream, Summed: true}, {Name: latency.TimingAppGuardrail, D: s.Guardrail, Summed: true},
		{Name: latency.TimingAppPostProcess, D: s.Post, Summed: true}, {Name: latency.TimingAppBackpressure, D: s.Backpressure, Summed: true},
	}
}

// waitReader is the upstream's body, timed: the time spent in its Read is
// waiting on upstream; the rest of reading events is the application's own.
type waitReader struct {
	r      io.Reader
	now    func() time.Time
	waited *time.Duration
}

func (w waitReader) Read(p []byte) (int, error) {
	t0 := w.now()
	n, err := w.r.Read(p)
	*w.waited += w.now().Sub(t0)
	return n, err
}
