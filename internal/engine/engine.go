package engine

import (
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Clock is the engine's time source when serving. WallClock is the real
// one; tests may pass a fake.
type Clock interface {
	Now() time.Time
	// Since is the clock's reading less t. The wall clock's is one
	// monotonic reading (time.Since), the same duration as Now().Sub(t)
	// for a t that carries a monotonic reading (every engine instant
	// does), at about half the cost: time.Now reads the wall clock too
	// (182 against 106 ns on the project's VM's kvm-clock).
	Since(t time.Time) time.Duration
	// After delivers on the returned channel once d has elapsed.
	After(d time.Duration) <-chan time.Time
	// Spin is how the engine waits for a step's deadline on this clock:
	// on After until Spin before it, then yielding in a loop until Now
	// reaches it. The wall clock's is spinWindow (its timers fire late
	// on a busy machine); a clock whose After fires on time — a test's
	// fake — returns 0 and is never spun on.
	Spin() time.Duration
}

type wallClock struct{}

func (wallClock) Now() time.Time                         { return time.Now() }
func (wallClock) Since(t time.Time) time.Duration        { return time.Since(t) }
func (wallClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (wallClock) Spin() time.Duration                    { return spinWindow }

// WallClock returns the real clock.
func WallClock() Clock { return wallClock{} }

// maxLag is how far behind its schedule the step loop may fall before it
// stops catching up (step deadlines are absolute: each step starts at the
// previous one's deadline, so timer lateness does not accumulate). It is
// long enough to ride out a loaded host's stalls (tens of milliseconds
// when other processes hold the cores): the tokens arrive late, but the
// server's timings stay its step-time model's, as a GPU's would.
const maxLag = time.Second

// Engine serves requests on a wall clock: Run is the step loop, Submit
// enqueues a request and returns its Stream.
type Engine struct {
	cfg   Config
	clock Clock
	epoch time.Time

	mu      sync.Mutex
	s       *scheduler // owned by Run's goroutine, except under mu before Run
	inbox   []*request
	aborts  []*request
	stopped bool
	running bool               // Run in progress
	pending int                // requests in inbox (for MaxWaiting)
	resets  []chan PrefixReset // closed unanswered when the engine stops
	resetsN atomic.Int32       // len(resets), read without mu by Run
	wake    chan struct{}

	afterDeliver func(lag time.Duration)  // tests: step lateness (−) before and (+) after delivery
	stepLate     func(late time.Duration) // ObserveSteps's
	held         []*Stream                // handed tokens while catching up, not yet woken (Run's)
	timer        *time.Timer              // the wall clock's step timer, reused step after step (Run's)

	// published counters, for Stats
	stRunning, stWaiting, stUsed         atomic.Int64
	stPreempt, stQueries, stHits         atomic.Int64
	stSteps, stPromptTokens, stGenTokens atomic.Int64
	stResets                             atomic.Int64
}

// New returns an engine for cfg (defaults filled in, then validated) on
// clock (WallClock when nil). Call Run to start its step loop.
func New(cfg Config, clock Clock) (*Engine, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if clock == nil {
		clock = WallClock()
	}
	e := &Engine{
		cfg:   cfg,
		clock: clock,
		epoch: clock.Now(),
		s:     newScheduler(cfg),
		wake:  make(chan struct{}, 1),
	}
	return e, nil
}

// Config returns the engine's configuration with defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

func (e *Engine) instant(t time.Time) int64 { return int64(t.Sub(e.epoch)) }
func (e *Engine) at(i int64) time.Time      { return e.epoch.Add(time.Duration(i)) }

// Submit validates r and queues it. The request is aborted at the engine's
// next step once ctx is done (its KV blocks are freed then); ctx is not
// retained beyond that hook.
func (e *Engine) Submit(ctx context.Context, r Request) (*Stream, error) {
	if err := validate(&r, e.cfg); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("engine: submit: %w", err)
	}
	st := &Stream{ready: make(chan struct{}, 1)}
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return nil, ErrStopped
	}
	if e.cfg.MaxWaiting > 0 && int(e.stWaiting.Load())+e.pending >= e.cfg.MaxWaiting {
		e.mu.Unlock()
		return nil, fmt.Errorf("%w (%d waiting)", ErrQueueFull, e.cfg.MaxWaiting)
	}
	now := e.instant(e.clock.Now())
	q := e.s.newRequest(&r, now)
	q.stream = st
	st.r = q
	st.tl = Timeline{Arrival: e.at(now), PromptTokens: q.promptLen}
	q.stopAbort = context.AfterFunc(ctx, func() { e.requestAbort(q) })
	e.inbox = append(e.inbox, q)
	e.pending++
	e.mu.Unlock()
	e.signal()
	return st, nil
}

func validate(r *Request, cfg Config) error {
	p := r.promptLen()
	switch {
	case p < 1:
		return fmt.Errorf("%w: the prompt is empty", ErrInvalid)
	case r.MaxTokens < 1:
		return fmt.Errorf("%w: max_tokens must be at least 1, got %d", ErrInvalid, r.MaxTokens)
	case r.MinTokens < 0:
		return fmt.Errorf("%w: min_tokens must be at least 0, got %d", ErrInvalid, r.MinTokens)
	case r.MinTokens > r.MaxTokens:
		return fmt.Errorf("%w: min_tokens (%d) must be at most max_tokens (%d)", ErrInvalid, r.MinTokens, r.MaxTokens)
	case p > cfg.MaxModelLen || r.MaxTokens > cfg.MaxModelLen-p:
		return &LengthError{PromptTokens: p, MaxTokens: r.MaxTokens, MaxModelLen: cfg.MaxModelLen}
	case r.RemotePrefill && cfg.KVLink.BytesPerSecond <= 0:
		return fmt.Errorf("%w: a remote prefill needs a KV link, and this engine has none", ErrInvalid)
	case r.RemoteTP < 0:
		return fmt.Errorf("%w: the prefill instance's TP (%d) must not be negative", ErrInvalid, r.RemoteTP)
	case cfg.DisableChunkedPrefill && cfg.PromptFitsStep && p > cfg.MaxNumBatchedTokens:
		return fmt.Errorf("%w: the prompt's %d tokens exceed max_num_batched_tokens (%d), which must hold a whole prompt with chunked prefill off",
			ErrPromptTooLong, p, cfg.MaxNumBatchedTokens)
	}
	return nil
}

func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *Engine) requestAbort(q *request) {
	e.mu.Lock()
	if !e.stopped {
		e.aborts = append(e.aborts, q)
	}
	e.mu.Unlock()
	e.signal()
}

// Run is the wall-clock step loop. It returns when ctx is done (then every
// unfinished request ends with FinishAbort and Submit returns ErrStopped),
// or at once with an error if Run already ran.
func (e *Engine) Run(ctx context.Context) error {
	e.mu.Lock()
	if e.running || e.stopped {
		e.mu.Unlock()
		return fmt.Errorf("engine: Run called twice: %w", ErrStopped)
	}
	e.running = true
	e.mu.Unlock()
	defer e.shutdown()

	defer e.wakeHeld() // before shutdown's aborts
	s := e.s
	start, idle := int64(0), true // idle since the engine's epoch
	var inbox, aborts []*request
	for {
		var held bool
		start, inbox, aborts, held = e.take(start, idle, inbox[:0], aborts[:0])
		e.admit(start, inbox, aborts)

		e.applyResets()
		dur, ok := s.schedule(start)
		e.publish()
		idle = !ok
		if idle {
			e.wakeHeld()
			// Nothing to run: wait unless take left submissions for a
			// later step. One queued after take has signalled e.wake,
			// which only this wait drains, so none is missed.
			if !held && !e.waitIdle(ctx) {
				return nil
			}
			continue
		}
		deadline := start + int64(dur)
		// The step's outcome does not depend on time: compute it now and
		// only publish it at the deadline.
		s.complete(deadline)
		if len(e.held) > 0 && e.instant(e.clock.Now()) < deadline {
			e.wakeHeld() // caught up: the held tokens leave before the loop sleeps
		}
		stop := e.sleepUntil(ctx, deadline)
		late := e.clock.Since(e.at(deadline))
		if e.afterDeliver != nil {
			e.afterDeliver(-late)
		}
		if e.stepLate != nil {
			e.stepLate(late)
		}
		e.handOut(s.emits, deadline, late >= dur)
		if e.afterDeliver != nil {
			e.afterDeliver(e.clock.Since(e.at(deadline)))
		}
		clear(s.emits)
		s.emits = s.emits[:0]
		if stop {
			return nil
		}
		start = deadline
		if now := e.instant(e.clock.Now()); now-start > int64(maxLag) {
			start = now
		}
	}
}

// admit adds the submissions take found (inbox) to the scheduler, but
// those aborted while they waited, and ends the aborted ones (aborts) at
// start, or at their arrival when later; it clears both for reuse.
func (e *Engine) admit(start int64, inbox, aborts []*request) {
	s := e.s
	for _, q := range inbox {
		if q.state != stDone { // aborted while it waited in the inbox
			s.add(q)
		}
	}
	clear(inbox)
	if len(aborts) == 0 {
		return
	}
	for _, q := range aborts {
		at := max(start, q.arrival) // one still in the inbox arrived after start
		if s.abort(q, at) {
			e.deliver(q, 0, FinishAbort, at)
		}
	}
	s.compactRunning()
	clear(aborts)
}

// waitIdle waits, with nothing to run, for a submission (e.wake), a KV
// transfer's end or ctx's; false when ctx ended.
func (e *Engine) waitIdle(ctx context.Context) bool {
	var ready <-chan time.Time // a KV transfer ending
	if at, ok := e.s.nextReady(); ok {
		ready = e.clock.After(time.Duration(at - e.instant(e.clock.Now())))
	}
	select {
	case <-ctx.Done():
		return false
	case <-e.wake:
	case <-ready:
	}
	return true
}

// ObserveSteps makes the step loop call f with each step's lateness: how
// long after the step's deadline (its end on the step-time model) the
// loop began handing out its tokens, as the engine's clock reads it. On
// the wall clock that is the host's scheduling (a timer fired late, the
// loop's thread waited for a core), which every stream of the step shares;
// what a stream's writer adds comes after it. Call it before Run.
func (e *Engine) ObserveSteps(f func(late time.Duration)) { e.stepLate = f }

// PrefixReset is what ResetPrefixCache did: the cached blocks it emptied
// and those it left because running requests hold them.
type PrefixReset struct {
	Dropped, Held int
}

// ResetPrefixCache empties the prefix cache: every cached block that no
// request holds loses its hash, so no later prompt hits it; blocks held by
// running requests keep theirs (Held). It takes effect before the engine's
// next step and returns once applied, or ctx's error.
func (e *Engine) ResetPrefixCache(ctx context.Context) (PrefixReset, error) {
	done := make(chan PrefixReset, 1)
	e.mu.Lock()
	switch {
	case e.stopped:
		e.mu.Unlock()
		return PrefixReset{}, ErrStopped
	case !e.running: // the scheduler is ours under mu before Run
		dropped, held := e.s.kv.resetPrefix()
		e.stResets.Add(1)
		e.mu.Unlock()
		return PrefixReset{Dropped: dropped, Held: held}, nil
	}
	e.resets = append(e.resets, done)
	e.resetsN.Store(int32(len(e.resets)))
	e.mu.Unlock()
	e.signal()
	select {
	case r, ok := <-done:
		if !ok {
			return PrefixReset{}, ErrStopped
		}
		return r, nil
	case <-ctx.Done():
		return PrefixReset{}, fmt.Errorf("engine: reset prefix cache: %w", ctx.Err())
	}
}

// applyResets answers the pending ResetPrefixCache calls, on Run's goroutine.
func (e *Engine) applyResets() {
	if e.resetsN.Load() == 0 {
		return
	}
	e.mu.Lock()
	pending := e.resets
	e.resets = nil
	e.resetsN.Store(0)
	e.mu.Unlock()
	dropped, held := e.s.kv.resetPrefix()
	e.stResets.Add(int64(len(pending)))
	for _, c := range pending {
		c <- PrefixReset{Dropped: dropped, Held: held}
	}
}

// take moves into inbox the submissions that arrived by the step's start
// and into aborts every abort request, and returns that start: start
// itself after a step, or, when the loop was idle since start, the instant
// it wakes (wakeAt), decided under the same lock as what it takes. A
// submission that arrived after the step's start stays in the engine's
// inbox for a later step (held): the step starting then was planned, on a
// GPU, before it arrived, however late the loop running behind its
// schedule takes its inbox (docs/engine.md). Submissions are stamped and
// queued under e.mu, so the inbox is in arrival order.
func (e *Engine) take(start int64, idle bool, inbox, aborts []*request) (int64, []*request, []*request, bool) {
	var now int64
	if idle {
		now = e.instant(e.clock.Now())
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if idle {
		start = e.wakeAt(start, now)
	}
	n := 0
	for n < len(e.inbox) && e.inbox[n].arrival <= start {
		n++
	}
	inbox = append(inbox, e.inbox[:n]...)
	rest := copy(e.inbox, e.inbox[n:])
	clear(e.inbox[rest:])
	e.inbox = e.inbox[:rest]
	aborts, e.aborts = e.aborts, aborts
	e.pending = len(e.inbox)
	return start, inbox, aborts, len(e.inbox) > 0
}

// wakeAt is the instant an engine idle since idleSince, woken at now,
// starts its next step: at the first waiting submission's arrival, as a
// GPU's engine would however late this loop woke (an engine on the
// virtual clock does the same), or now when none waits or the loop woke
// more than maxLag after it. Called with e.mu held.
func (e *Engine) wakeAt(idleSince, now int64) int64 {
	if len(e.inbox) == 0 {
		return now
	}
	first := e.inbox[0].arrival
	if now-first > int64(maxLag) {
		return now
	}
	return max(idleSince, min(first, now))
}

// spinWindow is the wall clock's Spin: how long before a step deadline the
// loop stops sleeping on a timer and yields in a loop instead, since Go
// timers fire up to a few hundred microseconds late on a busy machine.
const spinWindow = 300 * time.Microsecond

// sleepUntil waits until the engine instant deadline as the clock says
// (Clock.Spin); true when ctx ended first.
func (e *Engine) sleepUntil(ctx context.Context, deadline int64) bool {
	spin := e.clock.Spin()
	wait := time.Duration(deadline-e.instant(e.clock.Now())) - spin
	if wait > 0 {
		select {
		case <-ctx.Done():
			return true
		case <-e.after(wait):
		}
	}
	if spin > 0 {
		for e.instant(e.clock.Now()) < deadline {
			runtime.Gosched()
		}
	}
	return ctx.Err() != nil
}

// after is the clock's After for the step loop. On the wall clock it is
// one timer reset step after step, so that a step allocates nothing: an
// allocation on the loop's goroutine during a garbage collection's mark
// may make it assist the collector, delaying the step's tokens.
func (e *Engine) after(d time.Duration) <-chan time.Time {
	if _, wall := e.clock.(wallClock); !wall {
		return e.clock.After(d)
	}
	if e.timer == nil {
		e.timer = time.NewTimer(d)
	} else {
		e.timer.Reset(d) // a timer's channel holds no stale value after Reset (Go 1.23)
	}
	return e.timer.C
}

// handOut delivers a step's emits, stamped at, to their streams. While
// the loop catches up on its schedule (behind: woken a step or more after
// the step's end), the streams are handed their tokens without a wake-up:
// the overdue steps' tokens leave together, each stream's merged into one
// event (Stream.Recv), when the loop has caught up (wakeHeld: before it
// sleeps or waits) — one late write per stream, as a stalled GPU server's,
// not a burst of a chunk per overdue step, and the steps' instants unchanged.
func (e *Engine) handOut(emits []Output, at int64, behind bool) {
	if !behind {
		e.wakeHeld()
		for _, m := range emits {
			e.deliver(m.r, m.Tokens, m.Finish, at)
		}
		return
	}
	for _, m := range emits {
		if e.hand(m.r, m.Tokens, m.Finish, at) {
			e.held = append(e.held, m.r.stream)
		}
	}
}

// wakeHeld wakes the streams handOut handed tokens to without a wake-up.
func (e *Engine) wakeHeld() {
	for i, st := range e.held {
		st.wake()
		e.held[i] = nil
	}
	e.held = e.held[:0]
}

// deliver hands n tokens (and maybe the finish) to q's stream and wakes
// its reader.
func (e *Engine) deliver(q *request, n int, fin FinishReason, at int64) {
	if e.hand(q, n, fin, at) {
		q.stream.wake()
	}
}

// wake makes a Recv waiting on s return.
func (s *Stream) wake() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// hand adds n tokens (and maybe the finish) to q's stream's pending
// event without waking its reader; false when q has no stream.
func (e *Engine) hand(q *request, n int, fin FinishReason, at int64) bool {
	st := q.stream
	if st == nil {
		return false
	}
	t := e.at(at)
	st.mu.Lock()
	st.pending.Tokens += n
	st.pending.At = t
	st.has = true
	tl := &st.tl
	if q.scheduled >= 0 && tl.Scheduled.IsZero() {
		tl.Scheduled = e.at(q.scheduled)
		tl.CachedTokens = q.cachedTokens
	}
	if q.firstTok >= 0 && tl.FirstToken.IsZero() {
		tl.FirstToken = e.at(q.firstTok)
	}
	if q.firstAnswer >= 0 && tl.FirstAnswer.IsZero() {
		tl.FirstAnswer = e.at(q.firstAnswer)
	}
	tl.OutputTokens = q.output
	tl.ReasoningTokens = min(q.reasoning, q.output)
	tl.PrefillChunks = q.chunks
	tl.Preemptions = q.preemptions
	if q.xferStart >= 0 && tl.KVTransferStart.IsZero() {
		tl.KVTransferStart, tl.KVTransferEnd, tl.KVTransferTokens = e.at(q.xferStart), e.at(q.xferEnd), q.xferTokens
	}
	if fin != "" {
		st.pending.Finish = fin
		tl.Finished = t
		tl.Finish = fin
	}
	st.mu.Unlock()
	if fin != "" && q.stopAbort != nil {
		q.stopAbort()
	}
	return true
}

func (e *Engine) publish() {
	s := e.s
	e.stRunning.Store(int64(len(s.running)))
	e.stWaiting.Store(int64(s.numWaiting() + s.numTransfers()))
	e.stUsed.Store(int64(s.kv.used()))
	e.stPreempt.Store(s.preemptions)
	e.stQueries.Store(s.prefixQueries)
	e.stHits.Store(s.prefixHits)
	e.stSteps.Store(s.steps)
	e.stPromptTokens.Store(s.promptTokens)
	e.stGenTokens.Store(s.genTokens)
}

// shutdown stops the engine and aborts every unfinished request.
func (e *Engine) shutdown() {
	e.mu.Lock()
	e.stopped = true
	inbox := e.inbox
	e.inbox, e.aborts, e.pending = nil, nil, 0
	for _, c := range e.resets {
		close(c)
	}
	e.resets = nil
	e.mu.Unlock()
	s := e.s
	now := e.instant(e.clock.Now())
	var live []*request
	live = append(live, s.running...)
	live = append(live, s.transfers...)
	s.waiting.each(func(r *request) { live = append(live, r) })
	for _, q := range inbox {
		if q.state != stDone { // not already aborted while it waited
			live = append(live, q)
		}
	}
	for _, q := range live {
		if q.state != stDone {
			s.finishReq(q, now, FinishAbort)
		}
		e.deliver(q, 0, FinishAbort, now)
	}
	s.compactRunning()
	e.publish()
	e.stWaiting.Store(0)
}

// Stats returns a snapshot of the engine's state; safe from any goroutine.
func (e *Engine) Stats() Stats {
	st := Stats{
		Running:           int(e.stRunning.Load()),
		Waiting:           int(e.stWaiting.Load()),
		PrefixQueries:     e.stQueries.Load(),
		PrefixHits:        e.stHits.Load(),
		Preemptions:       e.stPreempt.Load(),
		NumBlocks:         e.cfg.NumBlocks,
		BlockSize:         e.cfg.BlockSize,
		Steps:             e.stSteps.Load(),
		PromptTokens:      e.stPromptTokens.Load(),
		GenerationTokens:  e.stGenTokens.Load(),
		PrefixCacheResets: e.stResets.Load(),
	}
	e.mu.Lock()
	st.Waiting += e.pending
	e.mu.Unlock()
	st.KVUsage = math.Min(1, float64(e.stUsed.Load())/float64(e.cfg.NumBlocks))
	return st
}

// Stream is one request's token events.
type Stream struct {
	r     *request
	ready chan struct{}

	mu      sync.Mutex
	pending Event
	has     bool
	eof     bool
	tl      Timeline
}

// ID returns the request's id.
func (s *Stream) ID() string { return s.r.id }

// Recv returns the next event: the tokens emitted since the previous Recv
// (merged when the reader fell behind, At the latest), and io.EOF after the
// event that carried Finish. It blocks until an event is ready or ctx is
// done; it never blocks the engine.
func (s *Stream) Recv(ctx context.Context) (Event, error) {
	for {
		s.mu.Lock()
		if s.has {
			ev := s.pending
			s.pending, s.has = Event{}, false
			if ev.Finish != "" {
				s.eof = true
			}
			s.mu.Unlock()
			return ev, nil
		}
		if s.eof {
			s.mu.Unlock()
			return Event{}, io.EOF
		}
		s.mu.Unlock()
		select {
		case <-s.ready:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Timeline returns the request's timeline so far; it is complete once Recv
// has returned io.EOF.
func (s *Stream) Timeline() Timeline {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tl
}
