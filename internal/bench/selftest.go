package bench

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/stats"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// SelfTestOptions sizes `bench --self-test`.
type SelfTestOptions struct {
	// Streams is the number of concurrent streams of the fidelity test.
	Streams int
	// Gap is the time between a stream's tokens (the first comes 500 ms
	// after the request); starts are spread evenly over a stream's life.
	Gap time.Duration
	// Rate and RateDuration drive the rate test; Tokens per stream.
	Rate         float64
	RateDuration time.Duration
	Tokens       int
	// Many is the number of requests of the memory-bound test.
	Many int
}

// DefaultSelfTestOptions are the sizes of `bench --self-test`.
func DefaultSelfTestOptions() SelfTestOptions {
	return SelfTestOptions{Streams: 1000, Gap: 50 * time.Millisecond, Rate: 5000, RateDuration: 2 * time.Second,
		Tokens: 16, Many: 50000}
}

// SelfTestResult is what the self-test measured.
type SelfTestResult struct {
	Streams, Tokens int
	Gap             time.Duration
	// TTFT error at Streams concurrent streams (client arrival − server
	// flush), for bench's client and for the minimal client (the floor).
	TTFTErr, FloorTTFTErr [3]float64 // P50, P99, max in ms
	ITLErrP99MS           float64
	Errors, FloorErrors   int
	// Live heap + stacks per in-flight stream, client and null server
	// together, for bench's client and for the minimal client.
	BytesPerStream, FloorBytesPerStream float64

	TargetRPS, ScheduledRPS, AchievedRPS float64
	SendLagP50MS, SendLagP99MS           float64
	RateErrors                           int
	// PacerOnlyRPS is the same schedule with no requests at all: the
	// pacer's own ceiling on this machine.
	PacerOnlyRPS float64

	Many        int
	BytesPerReq float64 // live heap growth per finished request
	HeapStartMB float64
	HeapEndMB   float64
	ManyWall    time.Duration
	CPUs        int
	GoMaxProcs  int
}

// SelfTest measures this client against loopback servers and prints the
// figures: TTFT error at many concurrent streams, achieved/target rate,
// memory per in-flight stream, and memory growth over many requests. Where
// a figure depends on the machine, the floor (a minimal client, or the
// pacer alone) is measured in the same run.
func SelfTest(ctx context.Context, o SelfTestOptions, out io.Writer) error {
	r, err := RunSelfTest(ctx, o, out)
	if err != nil {
		return err
	}
	r.write(out)
	return nil
}

// RunSelfTest runs the self-test and returns its figures; progress lines
// go to log.
func RunSelfTest(ctx context.Context, o SelfTestOptions, log io.Writer) (*SelfTestResult, error) {
	if o.Gap <= 0 {
		o.Gap = 50 * time.Millisecond
	}
	if o.Streams <= 0 || o.Rate <= 0 || o.RateDuration <= 0 || o.Tokens <= 0 || o.Many <= 0 {
		return nil, fmt.Errorf("self-test: sizes must be positive")
	}
	res := &SelfTestResult{Streams: o.Streams, Tokens: o.Tokens, Gap: o.Gap, TargetRPS: o.Rate, Many: o.Many, CPUs: runtime.NumCPU(), GoMaxProcs: runtime.GOMAXPROCS(0)}
	fmt.Fprintf(log, "self-test 1/3: %d concurrent streams of %d tokens (bench client, then minimal client)\n", o.Streams, o.Tokens)
	if err := fidelityTest(ctx, o, res); err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "self-test 2/3: open loop at %g req/s for %s\n", o.Rate, o.RateDuration)
	if err := rateTest(ctx, o, res); err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "self-test 3/3: %d requests, live heap growth\n", o.Many)
	if err := manyTest(ctx, o, res); err != nil {
		return nil, err
	}
	return res, nil
}

// liveBytes is the live heap plus goroutine stacks after a GC.
func liveBytes() float64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"}}
	metrics.Read(s)
	var t float64
	for _, x := range s {
		if x.Value.Kind() == metrics.KindUint64 {
			t += float64(x.Value.Uint64())
		}
	}
	return t
}

// fidelityTest measures the TTFT and ITL errors of Streams concurrent
// streams, for bench's client and for the minimal client, then the memory
// per in-flight stream of each, in passes of their own.
func fidelityTest(ctx context.Context, o SelfTestOptions, res *SelfTestResult) error {
	g, err := newFidelityRig(o)
	if err != nil {
		return err
	}
	defer g.lb.Close()
	b, _, err := g.pass(ctx, false, false)
	if err != nil {
		return err
	}
	res.TTFTErr = p50p99max(b.ttftErr)
	res.ITLErrP99MS, res.Errors = ms(stats.Percentile(b.itlErr, 99)), b.errors
	m, _, err := g.pass(ctx, true, false)
	if err != nil {
		return err
	}
	res.FloorTTFTErr = p50p99max(m.ttftErr)
	res.FloorErrors = m.errors
	if _, res.BytesPerStream, err = g.pass(ctx, false, true); err != nil {
		return err
	}
	_, res.FloorBytesPerStream, err = g.pass(ctx, true, true)
	return err
}

// fidelityRig is the fidelity test's loopback server. Each stream waits
// 500 ms for its first token, then Gap between tokens; its life is
// L = 500 ms + (Tokens − 1) × Gap. Starts are spread evenly over L, the
// steady state of Streams concurrent streams: Streams / L new responses
// and Streams × Tokens / L events per second.
type fidelityRig struct {
	o    SelfTestOptions
	now  func() int64
	lb   *loopback
	life time.Duration
}

func newFidelityRig(o SelfTestOptions) (*fidelityRig, error) {
	clock := NewRealClock()
	now := func() int64 { return int64(clock.Now()) }
	first := 500 * time.Millisecond
	lb, err := startLoopback(o.Tokens, first, o.Gap, now, true)
	if err != nil {
		return nil, err
	}
	return &fidelityRig{o: o, now: now, lb: lb, life: first + time.Duration(o.Tokens-1)*o.Gap}, nil
}

// pass runs Streams streams through one client kind and returns their
// errors; with mem it also samples the live heap per in-flight stream at
// 0.95 of a stream's life (a forced GC, so kept out of the timing passes).
func (g *fidelityRig) pass(ctx context.Context, minimal, mem bool) (f *fidelity, perStream float64, err error) {
	var cl *Client
	if !minimal {
		c, err := NewClient(Target{BaseURL: g.lb.URL(), Endpoint: EndpointChat, Model: "loopback", Stream: true, Timeout: time.Minute}, g.now, 0)
		if err != nil {
			return nil, 0, err
		}
		defer c.Close()
		cl = c
	}
	f = &fidelity{}
	var base float64
	if mem {
		base = liveBytes()
	}
	var wg sync.WaitGroup
	var inflight atomic.Int64
	for i := range g.o.Streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * g.life / time.Duration(g.o.Streams))
			inflight.Add(1)
			id := fmt.Sprintf("fid-%v-%v-%d", minimal, mem, i)
			ok, first, chunks := g.stream(ctx, cl, id)
			inflight.Add(-1)
			f.add(ok, first, chunks, g.lb.flushed(id))
		}()
	}
	if mem {
		time.Sleep(g.life * 95 / 100)
		perStream = (liveBytes() - base) / float64(max(inflight.Load(), 1))
	}
	wg.Wait()
	return f.sorted(), perStream, ctx.Err()
}

// stream sends one stream through bench's client, or through the minimal
// client when cl is nil (which keeps no chunk instants: chunks is nil).
func (g *fidelityRig) stream(ctx context.Context, cl *Client, id string) (ok bool, first int64, chunks []int64) {
	if cl == nil {
		c, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		f, _, err := minimalClient(c, strings.TrimPrefix(g.lb.URL(), "http://"), id, g.now)
		return err == nil && f != 0, f, nil
	}
	req := workload.Request{Prompt: "hi", MaxTokens: g.o.Tokens, InputTokens: 2}
	rec := &latency.Record{ID: id}
	cl.Do(ctx, &req, rec)
	return rec.OK(), rec.FirstTokenNS, nonNil(rec.ChunkNS)
}

// rateTest drives an open loop at o.Rate through bench's client, then the
// same schedule with requests that do nothing (the pacer's floor).
func rateTest(ctx context.Context, o SelfTestOptions, res *SelfTestResult) error {
	g, err := newLoopbackRig(o)
	if err != nil {
		return err
	}
	defer g.Close()
	var errs int
	r := &Runner{Doer: g.cl, Source: g.src, Clock: g.clock, RunID: "rate", Emit: func(rec *latency.Record) {
		if !rec.OK() {
			errs++
		}
	}}
	// A short warm-up opens connections first.
	ph, err := r.Run(ctx, "rate", workload.Load{Rate: o.Rate, Arrival: workload.Constant, Duration: o.RateDuration,
		WarmupDuration: o.RateDuration / 4})
	if err != nil {
		return err
	}
	res.ScheduledRPS, res.AchievedRPS = ph.ScheduledRPS, ph.AchievedRPS
	res.SendLagP50MS, res.SendLagP99MS = ph.SendLagP50MS, ph.SendLagP99MS
	res.RateErrors = errs

	// The pacer alone: same schedule, requests that do nothing.
	nop := DoerFunc(func(_ context.Context, _ *workload.Request, rec *latency.Record) {
		rec.SentNS = int64(g.clock.Now())
		rec.EndNS, rec.FirstTokenNS = rec.SentNS, rec.SentNS
	})
	r2 := &Runner{Doer: nop, Source: g.src, Clock: g.clock, RunID: "pace", Emit: func(*latency.Record) {}}
	ph2, err := r2.Run(ctx, "pace", workload.Load{Rate: o.Rate, Arrival: workload.Constant, Duration: o.RateDuration})
	if err != nil {
		return err
	}
	res.PacerOnlyRPS = ph2.AchievedRPS
	return ctx.Err()
}

// loopbackRig is bench's client of a loopback server that streams o.Tokens
// tokens without delay, the workload that asks for them, and the run's
// clock: what the rate and memory tests drive.
type loopbackRig struct {
	clock Clock
	lb    *loopback
	cl    *Client
	src   *workload.Synthetic
}

func newLoopbackRig(o SelfTestOptions) (*loopbackRig, error) {
	clock := NewRealClock()
	now := func() int64 { return int64(clock.Now()) }
	lb, err := startLoopback(o.Tokens, 0, 0, now, false)
	if err != nil {
		return nil, err
	}
	cl, err := NewClient(Target{BaseURL: lb.URL(), Endpoint: EndpointChat, Model: "loopback", Stream: true, Timeout: time.Minute}, now, 0)
	if err != nil {
		lb.Close()
		return nil, err
	}
	src := &workload.Synthetic{Chat: true, Input: workload.Fixed(8), Output: workload.Fixed(o.Tokens), Turns: 1, Seed: 1}
	return &loopbackRig{clock: clock, lb: lb, cl: cl, src: src}, nil
}

// Close closes the client, then the server.
func (g *loopbackRig) Close() {
	g.cl.Close()
	g.lb.Close()
}

// DoerFunc adapts a function to Doer.
type DoerFunc func(ctx context.Context, req *workload.Request, rec *latency.Record)

// Do calls f.
func (f DoerFunc) Do(ctx context.Context, req *workload.Request, rec *latency.Record) {
	f(ctx, req, rec)
}

// manyTest runs many short requests through the whole path bench uses
// (records serialized, the report's collector, the compatibility views)
// and measures how the live heap grows per finished request.
func manyTest(ctx context.Context, o SelfTestOptions, res *SelfTestResult) error {
	g, err := newLoopbackRig(o)
	if err != nil {
		return err
	}
	defer g.Close()
	coll := report.NewCollector(report.Options{})
	w := results.Discard()
	tenth := max(o.Many/10, 1)
	r := &Runner{Doer: g.cl, Source: g.src, Clock: g.clock, RunID: "many", Emit: func(rec *latency.Record) {
		w.Write(rec)
		coll.Add(rec)
	}}
	// Let the previous test's connections and goroutines wind down.
	time.Sleep(time.Second)
	start := time.Now()
	// Warm the path up, then measure from the tenth request on.
	if _, err := r.Run(ctx, "many", workload.Load{Concurrency: 32, Requests: tenth}); err != nil {
		return err
	}
	first := liveBytes()
	if _, err := r.Run(ctx, "many", workload.Load{Concurrency: 32, Requests: o.Many - tenth}); err != nil {
		return err
	}
	last := liveBytes()
	res.ManyWall = time.Since(start)
	res.BytesPerReq = (last - first) / float64(o.Many-tenth)
	res.HeapStartMB, res.HeapEndMB = first/(1<<20), last/(1<<20)
	runtime.KeepAlive(coll)
	return ctx.Err()
}

func (r *SelfTestResult) write(w io.Writer) {
	fmt.Fprintf(w, "\ntokentrace bench --self-test (%d CPUs, GOMAXPROCS %d; client and loopback servers share them)\n\n", r.CPUs, r.GoMaxProcs)
	fmt.Fprintf(w, "TTFT error at %d concurrent streams, a token every %s each (client arrival − server flush):\n", r.Streams, r.Gap)
	fmt.Fprintf(w, "  bench client     P50 %.3f ms  P99 %.3f ms  max %.3f ms  (errors %d; ITL error P99 %.3f ms)\n", r.TTFTErr[0], r.TTFTErr[1], r.TTFTErr[2], r.Errors, r.ITLErrP99MS)
	fmt.Fprintf(w, "  minimal client   P50 %.3f ms  P99 %.3f ms  max %.3f ms  (errors %d)  ← floor of this host\n", r.FloorTTFTErr[0], r.FloorTTFTErr[1], r.FloorTTFTErr[2], r.FloorErrors)
	fmt.Fprintf(w, "memory per in-flight stream (live heap + stacks, client and null server together):\n")
	fmt.Fprintf(w, "  bench client     %.1f KiB\n  minimal client   %.1f KiB  → bench's client above a minimal one: %.1f KiB\n",
		r.BytesPerStream/1024, r.FloorBytesPerStream/1024, (r.BytesPerStream-r.FloorBytesPerStream)/1024)
	ratio := 0.0
	if r.ScheduledRPS > 0 {
		ratio = r.AchievedRPS / r.ScheduledRPS
	}
	fmt.Fprintf(w, "open loop at %g req/s of %d-token streams:\n", r.TargetRPS, r.Tokens)
	fmt.Fprintf(w, "  achieved %.1f req/s of %.1f scheduled (ratio %.4f), send lag P50 %.3f ms P99 %.3f ms, errors %d\n",
		r.AchievedRPS, r.ScheduledRPS, ratio, r.SendLagP50MS, r.SendLagP99MS, r.RateErrors)
	fmt.Fprintf(w, "  pacer alone (no requests) achieved %.1f req/s  ← floor of this host\n", r.PacerOnlyRPS)
	fmt.Fprintf(w, "memory over %d requests (records, report collector, compatibility views):\n", r.Many)
	fmt.Fprintf(w, "  live heap %.1f MiB → %.1f MiB: %.0f bytes per finished request (%s)\n", r.HeapStartMB, r.HeapEndMB, r.BytesPerReq, r.ManyWall.Round(time.Millisecond))
}

// p50p99max is the P50, P99 and maximum of sorted nanoseconds, in ms.
func p50p99max(sorted []int64) [3]float64 {
	return [3]float64{ms(stats.Percentile(sorted, 50)), ms(stats.Percentile(sorted, 99)), ms(stats.Percentile(sorted, 100))}
}
