package engine

import (
	"context"
	"errors"
	"io"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/workload"
)

// fakeClock is a manual clock: After registers a timer that Advance fires.
// Its timers fire on time, so it is not spun on unless spin is set.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []fakeTimer
	spin   time.Duration
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func (c *fakeClock) Spin() time.Duration { return c.spin }

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.timers = append(c.timers, fakeTimer{c.now.Add(d), ch})
	return ch
}

// advanceToTimer waits for the engine to arm a timer, then moves the clock
// to it and fires it; it returns the new time.
func (c *fakeClock) advanceToTimer(t *testing.T) time.Time {
	t.Helper()
	return c.advanceLate(t, 0)
}

// advanceLate is advanceToTimer with the timer firing late by late.
func (c *fakeClock) advanceLate(t *testing.T, late time.Duration) time.Time {
	t.Helper()
	return c.advanceLateThen(t, late, nil)
}

// waitArmed returns once a timer is armed (the engine's loop sleeps).
func (c *fakeClock) waitArmed(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Microsecond) {
		c.mu.Lock()
		n := len(c.timers)
		c.mu.Unlock()
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the engine armed no timer")
		}
	}
}

// advance moves the clock forward by d without firing any timer.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// advanceLateThen is advanceLate calling during (when not nil) once the
// clock has moved and before the timer fires: what happens while the
// engine's loop is stalled.
func (c *fakeClock) advanceLateThen(t *testing.T, late time.Duration, during func()) time.Time {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		if len(c.timers) > 0 {
			tm := c.timers[0]
			c.timers = c.timers[1:]
			c.now = tm.at.Add(late)
			c.mu.Unlock()
			if during != nil {
				during()
			}
			tm.ch <- tm.at
			return tm.at
		}
		c.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("the engine armed no timer")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func startEngine(t *testing.T, cfg Config, clock Clock) (*Engine, context.CancelFunc) {
	t.Helper()
	e, err := New(cfg, clock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return e, cancel
}

// submitOne starts an engine with testConfig on clock and submits request
// "a": 10 prompt tokens, maxTokens out, EOS ignored.
func submitOne(t *testing.T, clock *fakeClock, maxTokens int) *Stream {
	t.Helper()
	e, _ := startEngine(t, testConfig(), clock)
	st, err := e.Submit(context.Background(), Request{ID: "a", PromptLen: 10, MaxTokens: maxTokens, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// recvAll reads a stream to EOF.
func recvAll(t *testing.T, st *Stream) []Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var evs []Event
	for {
		ev, err := st.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return evs
		}
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
}

func TestWallClockStepsOnAbsoluteDeadlines(t *testing.T) {
	clock := newFakeClock()
	t0 := clock.Now()
	st := submitOne(t, clock, 3)
	for range 3 {
		clock.advanceToTimer(t)
	}
	got := recvAll(t, st)
	// Each event is merged or not depending on reader timing; the sum and
	// the last instant are fixed: 1.1 ms prefill, two 1.01 ms decodes.
	total := 0
	for _, ev := range got {
		total += ev.Tokens
	}
	end := t0.Add(1100*time.Microsecond + 2*1010*time.Microsecond)
	if total != 3 || !got[len(got)-1].At.Equal(end) || got[len(got)-1].Finish != FinishLength {
		t.Fatalf("events %+v; want 3 tokens ending at %v", got, end)
	}
	tl := st.Timeline()
	want := Timeline{Arrival: t0, Scheduled: t0, FirstToken: t0.Add(1100 * time.Microsecond), Finished: end,
		PromptTokens: 10, OutputTokens: 3, PrefillChunks: 1, Finish: FinishLength}
	if diff := cmp.Diff(want, tl); diff != "" {
		t.Fatalf("timeline (-want +got):\n%s", diff)
	}
}

// TestStepWaitSpinsAsTheClockSays: the engine sleeps on the clock's timer
// until the clock's Spin before a step's deadline, then waits for Now to
// reach it; the step's tokens carry the deadline. A clock that does not
// spin (Spin 0) arms its timer for the deadline itself.
func TestStepWaitSpinsAsTheClockSays(t *testing.T) {
	for _, spin := range []time.Duration{0, 300 * time.Microsecond} {
		t.Run(spin.String(), func(t *testing.T) {
			clock := newFakeClock()
			clock.spin = spin
			t0 := clock.Now()
			st := submitOne(t, clock, 1)
			deadline := t0.Add(1100 * time.Microsecond) // the prefill step's
			if armed := clock.advanceToTimer(t); !armed.Equal(deadline.Add(-spin)) {
				t.Errorf("timer armed for %v, want %v (the deadline %v less the clock's spin %v)", armed.Sub(t0), deadline.Add(-spin).Sub(t0), deadline.Sub(t0), spin)
			}
			clock.advance(spin) // the spinning loop sees Now reach the deadline
			evs := recvAll(t, st)
			if len(evs) == 0 || !evs[len(evs)-1].At.Equal(deadline) {
				t.Fatalf("events %+v, want the token at %v", evs, deadline.Sub(t0))
			}
		})
	}
}

func TestLateTimersDoNotAccumulateDrift(t *testing.T) {
	// Every timer fires 300 µs late; the steps still start at the previous
	// deadline, so the fifth token's instant is the sum of the step times.
	clock := newFakeClock()
	t0 := clock.Now()
	st := submitOne(t, clock, 5)
	for range 5 {
		clock.advanceLate(t, 300*time.Microsecond)
	}
	evs := recvAll(t, st)
	want := t0.Add(1100*time.Microsecond + 4*1010*time.Microsecond)
	if last := evs[len(evs)-1]; !last.At.Equal(want) {
		t.Fatalf("last token at %v, want %v (drift %v)", last.At.Sub(t0), want.Sub(t0), last.At.Sub(want))
	}
}

// A host stall shorter than maxLag (the loop wakes 50 ms after a deadline)
// delays the tokens' delivery, not the schedule: the engine catches up step
// by step, and every token carries the instant of the undisturbed schedule,
// so a server's reported timings stay its step-time model's on a loaded
// machine (what calibration fits). A stall beyond maxLag restarts the
// schedule from the current time.
func TestHostStallKeepsSchedule(t *testing.T) {
	for _, c := range []struct {
		name  string
		stall time.Duration
		want  time.Duration // the last token's instant from the arrival
	}{
		{"50ms", 50 * time.Millisecond, 1100*time.Microsecond + 4*1010*time.Microsecond},
		{"beyond maxLag", maxLag + time.Second, 1100*time.Microsecond + maxLag + time.Second + 4*1010*time.Microsecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := newFakeClock()
			t0 := clock.Now()
			st := submitOne(t, clock, 5)
			clock.advanceLate(t, c.stall)
			if c.stall > maxLag {
				for range 4 {
					clock.advanceToTimer(t)
				}
			}
			evs := recvAll(t, st)
			if last := evs[len(evs)-1]; !last.At.Equal(t0.Add(c.want)) {
				t.Fatalf("last token at %v, want %v", last.At.Sub(t0), c.want)
			}
		})
	}
}

// While the loop catches up after a stall of 50 ms, it hands each overdue
// step's token to the stream without waking its reader; once caught up,
// before it sleeps, it wakes the reader once, which reads the 50 overdue
// tokens as one event stamped with the last overdue step's instant; the
// next step, on time, is an event of its own. The prefill ends at 1.1 ms,
// the decode steps take 1.01 ms: the second step's timer fires at
// 2.11 + 50 ms, when the steps ending at 2.11 … 51.6 ms are overdue.
func TestCatchUpWakesReadersOnce(t *testing.T) {
	clock := newFakeClock()
	t0 := clock.Now()
	e, _ := startEngine(t, testConfig(), clock)
	var mu sync.Mutex
	var woken []int // after each step's hand-out: a wake-up pending for the reader
	var st *Stream
	post := false // afterDeliver runs before and after each hand-out
	e.afterDeliver = func(time.Duration) {
		if post = !post; post {
			mu.Lock()
			woken = append(woken, len(st.ready))
			mu.Unlock()
		}
	}
	mu.Lock()
	var err error
	st, err = e.Submit(context.Background(), Request{ID: "a", PromptLen: 10, MaxTokens: 200, IgnoreEOS: true})
	mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clock.advanceToTimer(t) // the prefill, on time
	if ev, err := st.Recv(ctx); err != nil || ev.Tokens != 1 {
		t.Fatalf("first event %+v, %v", ev, err)
	}
	select { // a wake-up Recv did not need (the event was there first)
	case <-st.ready:
	default:
	}
	clock.advanceLate(t, 50*time.Millisecond)
	clock.waitArmed(t) // the loop caught up and sleeps
	ms := func(f float64) time.Time { return t0.Add(time.Duration(f * float64(time.Millisecond))) }
	for i, want := range []Event{{Tokens: 50, At: ms(51.6)}, {Tokens: 1, At: ms(52.61)}} {
		if i == 1 {
			clock.advanceToTimer(t) // the next step, on time
		}
		ev, err := st.Recv(ctx)
		if err != nil || ev.Tokens != want.Tokens || !ev.At.Equal(want.At) {
			t.Fatalf("event %d: %d tokens at %v (%v), want %d at %v", i, ev.Tokens, ev.At.Sub(t0), err, want.Tokens, want.At.Sub(t0))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(woken) < 52 {
		t.Fatalf("%d hand-outs, want 52 at least", len(woken))
	}
	for i, w := range woken[1:51] {
		if w != 0 {
			t.Errorf("overdue step %d woke the reader", i)
		}
	}
}

// A request that reaches the engine while its loop is stalled joins the
// first step planned at or after its arrival, not the steps the loop
// replays to catch up (planned, on a GPU, before it arrived): its queue
// time is never negative, and it is what the virtual clock's engine gives
// the same arrival. a (10-token prompt) prefills in [0, 1.1 ms] and then
// decodes in 1.01 ms steps; the loop wakes 50 ms late, when b arrives, at
// 51.1 ms. The steps start at 1.1 + 1.01·k ms; the first at or after
// 51.1 ms is k = 50, at 51.6 ms: b's queue is 0.5 ms, its prefill (a's
// decode and b's 10 tokens) 1 ms + 11 × 10 µs.
func TestStalledLoopAdmitsAtArrival(t *testing.T) {
	clock := newFakeClock()
	t0 := clock.Now()
	e, _ := startEngine(t, testConfig(), clock)
	if _, err := e.Submit(context.Background(), Request{ID: "a", PromptLen: 10, MaxTokens: 200, IgnoreEOS: true}); err != nil {
		t.Fatal(err)
	}
	var b *Stream
	clock.advanceLateThen(t, 50*time.Millisecond, func() {
		var err error
		if b, err = e.Submit(context.Background(), Request{ID: "b", PromptLen: 10, MaxTokens: 3, IgnoreEOS: true}); err != nil {
			t.Error(err)
		}
	})
	if b == nil {
		t.FailNow()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan Timeline, 1)
	go func() {
		if _, err := b.Recv(ctx); err == nil {
			got <- b.Timeline()
		}
		close(got)
	}()
	var tl Timeline
	for tl.FirstToken.IsZero() {
		select {
		case v, ok := <-got:
			if !ok {
				t.Fatal("b got no first token")
			}
			tl = v
		default:
			clock.advanceToTimer(t)
		}
	}
	ms := func(f float64) time.Time { return t0.Add(time.Duration(f * float64(time.Millisecond))) }
	want := []time.Time{ms(51.1), ms(51.6), ms(51.6 + 1.11)}
	if diff := cmp.Diff(want, []time.Time{tl.Arrival, tl.Scheduled, tl.FirstToken}); diff != "" {
		t.Fatalf("b's arrival, scheduling and first token (-want +got):\n%s", diff)
	}
}

// An idle engine starts a step at its first request's arrival, however
// late its loop wakes, and a request arriving after that instant waits for
// the next step (the virtual clock's rule): a arrives at 1 ms and b at
// 2 ms; a's prefill is [1, 2.1] ms whether or not the loop woke before b
// arrived, and b joins the step at 2.1 ms.
func TestIdleEngineStartsAtFirstArrival(t *testing.T) {
	clock := newFakeClock()
	t0 := clock.Now()
	e, _ := startEngine(t, testConfig(), clock)
	var st [2]*Stream
	for i, id := range []string{"a", "b"} {
		clock.advance(time.Millisecond)
		var err error
		if st[i], err = e.Submit(context.Background(), Request{ID: id, PromptLen: 10, MaxTokens: 2, IgnoreEOS: true}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		clock.advanceToTimer(t)
	}
	ms := func(f float64) time.Time { return t0.Add(time.Duration(f * float64(time.Millisecond))) }
	want := [][]time.Time{{ms(1), ms(1), ms(2.1)}, {ms(2), ms(2.1), ms(2.1 + 1.11)}}
	for i, s := range st {
		recvAll(t, s)
		tl := s.Timeline()
		if diff := cmp.Diff(want[i], []time.Time{tl.Arrival, tl.Scheduled, tl.FirstToken}); diff != "" {
			t.Errorf("request %d's arrival, scheduling and first token (-want +got):\n%s", i, diff)
		}
	}
}

func TestSlowReaderGetsMergedEvents(t *testing.T) {
	cfg := testConfig()
	cfg.StepTimer = linearTimer{base: 100 * time.Microsecond}
	e, _ := startEngine(t, cfg, nil)
	st, err := e.Submit(context.Background(), Request{ID: "a", PromptLen: 10, MaxTokens: 50, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { s := e.Stats(); return s.GenerationTokens == 50 && s.Running == 0 })
	evs := recvAll(t, st)
	if len(evs) != 1 || evs[0].Tokens != 50 || evs[0].Finish != FinishLength {
		t.Fatalf("events %+v; want one merged event of 50 tokens", evs)
	}
	if !evs[0].At.Equal(st.Timeline().Finished) {
		t.Fatalf("merged event at %v, finish at %v", evs[0].At, st.Timeline().Finished)
	}
	if _, err := st.Recv(context.Background()); !errors.Is(err, io.EOF) {
		t.Fatalf("Recv after EOF: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10 s")
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func TestCancelAbortsAndFreesBlocks(t *testing.T) {
	cfg := testConfig()
	cfg.StepTimer = linearTimer{base: 200 * time.Microsecond}
	e, _ := startEngine(t, cfg, nil)
	ctx, cancel := context.WithCancel(context.Background())
	st, err := e.Submit(ctx, Request{ID: "a", PromptLen: 200, MaxTokens: 300, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(ctx); err != nil { // first token: it is running
		t.Fatal(err)
	}
	if s := e.Stats(); s.Running != 1 || s.KVUsage == 0 {
		t.Fatalf("stats while running: %+v", s)
	}
	cancel()
	waitFor(t, func() bool { s := e.Stats(); return s.Running == 0 && s.KVUsage == 0 })
	evs := recvAll(t, st)
	if last := evs[len(evs)-1]; last.Finish != FinishAbort {
		t.Fatalf("last event %+v, want abort", last)
	}
	if tl := st.Timeline(); tl.Finish != FinishAbort || tl.OutputTokens >= 300 {
		t.Fatalf("timeline %+v", tl)
	}
}

func TestCancelWhileWaiting(t *testing.T) {
	e, err := New(testConfig(), nil) // not running: requests wait
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := e.Submit(ctx, Request{ID: "a", PromptLen: 10, MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	waitFor(t, func() bool { // the context hook runs on its own goroutine
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.aborts) == 1
	})
	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() { _ = e.Run(runCtx) }() // Run errs only when it already ran
	evs := recvAll(t, st)
	if len(evs) != 1 || evs[0].Finish != FinishAbort || evs[0].Tokens != 0 {
		t.Fatalf("events %+v", evs)
	}
	if tl := st.Timeline(); !tl.Scheduled.IsZero() || tl.Queue() != 0 {
		t.Fatalf("aborted-while-waiting timeline %+v", tl)
	}
}

func TestSubmitErrors(t *testing.T) {
	cfg := testConfig()
	cfg.MaxWaiting = 1
	e, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := e.Submit(ctx, Request{ID: "a", PromptLen: 10, MaxTokens: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Submit(ctx, Request{ID: "b", PromptLen: 10, MaxTokens: 3}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("second submit: %v, want ErrQueueFull", err)
	}
	_, err = e.Submit(ctx, Request{ID: "c", Prompt: make([]int32, 500), MaxTokens: 20})
	var le *LengthError
	if !errors.Is(err, ErrPromptTooLong) || !errors.As(err, &le) || *le != (LengthError{500, 20, 512}) {
		t.Fatalf("too long: %v", err)
	}
	for _, r := range []Request{{PromptLen: 10}, {PromptLen: 10, MaxTokens: -1}, {MaxTokens: 3}, {PromptLen: 3, MaxTokens: 3, MinTokens: -1}} {
		if _, err := e.Submit(ctx, r); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", r, err)
		}
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := e.Submit(done, Request{PromptLen: 1, MaxTokens: 1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("done ctx: %v", err)
	}
}

func TestStopAbortsEverything(t *testing.T) {
	cfg := testConfig()
	cfg.StepTimer = linearTimer{base: time.Millisecond}
	e, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.Run(ctx) }()
	var streams []*Stream
	for range 20 {
		st, err := e.Submit(context.Background(), Request{PromptLen: 100, MaxTokens: 400, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, st)
	}
	waitFor(t, func() bool { return e.Stats().Running > 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, st := range streams {
		evs := recvAll(t, st)
		if evs[len(evs)-1].Finish != FinishAbort {
			t.Fatalf("stream ended with %+v", evs[len(evs)-1])
		}
	}
	if _, err := e.Submit(context.Background(), Request{PromptLen: 1, MaxTokens: 1}); !errors.Is(err, ErrStopped) {
		t.Fatalf("submit after stop: %v", err)
	}
	if err := e.Run(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("second Run: %v", err)
	}
}

func TestConcurrentSubmitAndStats(t *testing.T) {
	cfg := testConfig()
	cfg.NumBlocks = 200
	cfg.StepTimer = linearTimer{base: 100 * time.Microsecond, perToken: time.Microsecond}
	cfg.EnablePrefixCaching = true
	e, _ := startEngine(t, cfg, nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				ctx, cancel := context.WithCancel(context.Background())
				st, err := e.Submit(ctx, Request{Prompt: tokens(32, 40+g, int32(i*100)), MaxTokens: 20, IgnoreEOS: true})
				if err != nil {
					t.Error(err)
					cancel()
					return
				}
				if i%5 == 4 {
					cancel() // some clients go away
				}
				n := 0
				for {
					ev, err := st.Recv(context.Background())
					if err != nil {
						break
					}
					n += ev.Tokens
				}
				cancel()
				mu.Lock()
				total += n
				mu.Unlock()
				_ = e.Stats()
			}
		}()
	}
	wg.Wait()
	waitFor(t, func() bool { s := e.Stats(); return s.Running == 0 && s.Waiting == 0 })
	s := e.Stats()
	if s.KVUsage != 0 || int64(total) != s.GenerationTokens || s.PrefixHits == 0 {
		t.Fatalf("stats %+v, tokens read %d", s, total)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"no timer":        func(c *Config) { c.StepTimer = nil },
		"no blocks":       func(c *Config) { c.NumBlocks = 0 },
		"block size":      func(c *Config) { c.BlockSize = -1 },
		"budget < block":  func(c *Config) { c.MaxNumBatchedTokens = 8 },
		"cache too small": func(c *Config) { c.NumBlocks = 10 },
		"policy":          func(c *Config) { c.Policy = "lifo" },
		"alpha":           func(c *Config) { c.Speculative = Speculative{K: 2, Alpha: 1.5} },
		"lognormal mean":  func(c *Config) { c.OutputLength = workload.LogNormal{MeanLen: 0, Sigma: 1} },
		"uniform":         func(c *Config) { c.OutputLength = workload.Uniform{Lo: 5, Hi: 2} },
		"max model len":   func(c *Config) { c.MaxModelLen = 0 },
	} {
		cfg := testConfig()
		mut(&cfg)
		if _, err := New(cfg, nil); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestDescribeAndDefaults(t *testing.T) {
	cfg := Config{Model: "m", GPU: "H100", GPUMemoryBytes: 80 * gib, StepTimer: linearTimer{}, NumBlocks: 1000, MaxModelLen: 4096}
	d := cfg.WithDefaults()
	if d.MaxNumBatchedTokens != 8192 || d.MaxNumSeqs != 1024 || d.BlockSize != 16 || d.Policy != PolicyFCFS {
		t.Fatalf("H100 defaults %+v", d)
	}
	cfg.GPU = "A100-80GB"
	if d := cfg.WithDefaults(); d.MaxNumBatchedTokens != 2048 || d.MaxNumSeqs != 256 {
		t.Fatalf("A100 defaults %d/%d", d.MaxNumBatchedTokens, d.MaxNumSeqs)
	}
	cfg.GPU, cfg.GPUMemoryBytes = "L4", 24*gib
	if d := cfg.WithDefaults(); d.MaxNumBatchedTokens != 2048 || d.MaxNumSeqs != 256 {
		t.Fatalf("L4 defaults %d/%d", d.MaxNumBatchedTokens, d.MaxNumSeqs)
	}
	cfg.DisableChunkedPrefill = true
	if d := cfg.WithDefaults(); d.MaxNumBatchedTokens != 4096 {
		t.Fatalf("unchunked budget %d, want max_model_len 4096", d.MaxNumBatchedTokens)
	}
	want := "engine: m on L4 (24 GiB)\n" +
		"  KV cache: 1000 blocks x 16 tokens = 16000 tokens\n" +
		"  max_model_len=4096 max_num_batched_tokens=4096 max_num_seqs=256 chunked_prefill=off prefix_caching=off scheduling=fcfs\n" +
		"  speculative=off output_length=lognormal:mean=256,sigma=1 max_waiting=unbounded seed=0"
	if diff := cmp.Diff(want, cfg.Describe()); diff != "" {
		t.Fatalf("Describe (-want +got):\n%s", diff)
	}
}

// TestSince: a clock's Since is its reading less t — a fake clock's
// exactly; the wall clock's a monotonic difference, so an instant an hour
// back is at least an hour ago whatever the wall clock does.
func TestSince(t *testing.T) {
	fc := newFakeClock()
	for _, d := range []time.Duration{0, time.Nanosecond, 20 * time.Millisecond, -time.Second} {
		if got := fc.Since(fc.Now().Add(-d)); got != d {
			t.Errorf("fake clock: Since(now - %v) = %v, want %v", d, got, d)
		}
	}
	wall := WallClock()
	if got := wall.Since(wall.Now().Add(-time.Hour)); got < time.Hour {
		t.Errorf("wall clock: Since(now - 1h) = %v, want at least 1h", got)
	}
}

// TestWallStepAllocatesNothing: on the wall clock the step loop waits on
// one timer it resets, so a decode step allocates nothing (an allocation
// on the loop's goroutine during a collection's mark may make it assist
// the collector, late for the step). 150 steps of one request, counted
// by the engine; before the reused timer each step allocated a timer and
// its channel.
func TestWallStepAllocatesNothing(t *testing.T) {
	cfg := testConfig()
	cfg.MaxModelLen = 4096
	cfg.NumBlocks = 512
	e, _ := startEngine(t, cfg, nil)
	st, err := e.Submit(context.Background(), Request{ID: "a", PromptLen: 10, MaxTokens: 400, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	recvTo := func(tokens int) {
		for n := 0; n < tokens; {
			ev, err := st.Recv(ctx)
			if err != nil {
				t.Fatal(err)
			}
			n += ev.Tokens
		}
	}
	recvTo(20) // the prefill and the first decode steps
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	steps0 := e.Stats().Steps
	recvTo(150)
	runtime.ReadMemStats(&m1)
	steps := e.Stats().Steps - steps0
	if perStep := float64(m1.Mallocs-m0.Mallocs) / float64(steps); steps < 100 || perStep >= 0.5 {
		t.Errorf("%d allocations in %d steps (%.2f a step), want under 0.5 a step", m1.Mallocs-m0.Mallocs, steps, perStep)
	}
}
