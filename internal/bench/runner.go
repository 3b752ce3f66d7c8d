package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/live"
	"github.com/tokentrace/tokentrace/internal/stats"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// Doer sends one request and measures it into a record (Client does).
type Doer interface {
	Do(ctx context.Context, req *workload.Request, rec *latency.Record)
}

// ToolCaller makes an agent step's tool calls (agent.Caller does): all at
// once when parallel, else one after another. It returns a span per call
// made, the results of the successful ones, and an error naming the first
// failed call.
type ToolCaller interface {
	Step(ctx context.Context, session int64, step int, calls []workload.ToolCall, parallel bool) ([]latency.ToolSpan, []string, error)
}

// PhaseResult is what the runner measured about its own schedule in one
// phase; the latency numbers are in the records.
type PhaseResult struct {
	Name string `json:"name"`
	Mode string `json:"mode"`
	// TargetRPS is the configured rate (open loop).
	TargetRPS   float64 `json:"target_rps,omitempty"`
	Concurrency int     `json:"concurrency,omitempty"`
	Sent        int     `json:"sent"`
	Finished    int     `json:"finished"`
	Warmup      int     `json:"warmup"`
	// Succeeded counts measured successes; ThroughputRPS is Succeeded /
	// (last end − first intended send) over the measured requests.
	Succeeded     int     `json:"succeeded"`
	ThroughputRPS float64 `json:"throughput_rps"`
	// CompletionRPS is (successes − 1) / (last end − first end): the
	// steady rate answers came back at, free of start-up and drain. Under
	// the server's capacity it follows the scheduled rate; past it, it
	// falls behind.
	CompletionRPS float64 `json:"completion_rps"`
	// ScheduledRPS is (n − 1) / (last − first intended send) over the
	// measured requests; AchievedRPS the same over the actual sends.
	// Their ratio is how well the client kept its schedule.
	ScheduledRPS float64 `json:"scheduled_rps,omitempty"`
	AchievedRPS  float64 `json:"achieved_rps,omitempty"`
	// SendLag is actual − intended send over the measured requests whose
	// only wait was the schedule (open loop, not held by a concurrency
	// cap): the client's own lateness.
	SendLagP50MS float64 `json:"send_lag_p50_ms"`
	SendLagP99MS float64 `json:"send_lag_p99_ms"`
	SendLagMaxMS float64 `json:"send_lag_max_ms"`
	// StartNS and EndNS bound the phase on the run's clock.
	StartNS     int64 `json:"start_ns"`
	EndNS       int64 `json:"end_ns"`
	Interrupted bool  `json:"interrupted,omitempty"`
}

// Runner drives requests from a workload through a Doer on a schedule.
type Runner struct {
	Doer   Doer
	Source workload.Source
	Clock  Clock
	// Emit receives every finished request, one call at a time, in the
	// order they finish.
	Emit func(*latency.Record)
	// RunID prefixes request ids ("<RunID>-<n>").
	RunID string
	// Grace is how long in-flight requests may finish after the run is
	// stopped (ctx done) before they are canceled; default 5 s.
	Grace time.Duration
	// Board, when set, is told of every send (the live view; Emit hands
	// it the records).
	Board *live.Board
	// late, when set, is the self-lateness watch, told of every send and
	// finish: it ticks only while a request is in flight.
	late *lateness
	// Tools makes agent steps' tool calls; required when the workload's
	// requests ask for tools.
	Tools ToolCaller
	// Agents, when set, records each agent session (a
	// workload.ToolSession) as an invoke_agent span, the parent of its
	// steps' request spans and of its tool calls' execute_tool spans.
	Agents *AgentSpans
	// Prepare, when set, is called with each request once it is built and
	// before its instant (it may resize the prompt: lengthGaps.prepare).
	Prepare func(ctx context.Context, req *workload.Request)
	// Epoch, when set, starts a phase at the clock's zero instant, waiting
	// for it, rather than when Run is called: generators given one start
	// instant (the shards of a workload) then keep one schedule.
	Epoch bool

	mu      sync.Mutex
	seq     atomic.Int64 // request ids
	session atomic.Int64 // session indices, across phases
}

// phaseRun is one phase's shared state.
type phaseRun struct {
	r       *Runner
	name    string
	load    workload.Load
	sendCtx context.Context // done: stop sending
	reqCtx  context.Context // done: cancel in-flight requests
	sem     chan struct{}
	tickets atomic.Int64
	total   int64 // warm-up + measured requests; 0: no bound
	end     time.Duration
	start   time.Duration
	wg      sync.WaitGroup

	mu                           sync.Mutex
	res                          PhaseResult
	lags                         stats.Sample // send lags, bounded memory
	lagMax                       int64
	firstI, lastI, firstS, lastS int64
	firstE, lastE                int64
	measured                     int
}

// Run runs one phase. ctx stops sending; requests in flight then get Grace
// to finish. It returns when every started request has been emitted.
func (r *Runner) Run(ctx context.Context, name string, load workload.Load) (PhaseResult, error) {
	if err := load.Validate(); err != nil {
		return PhaseResult{}, err
	}
	grace := r.Grace
	if grace == 0 {
		grace = 5 * time.Second
	}
	reqCtx, cancelReqs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelReqs()
	stopGrace := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(grace, cancelReqs)
		context.AfterFunc(reqCtx, func() { t.Stop() })
	})
	defer stopGrace()

	start := r.Clock.Now()
	if r.Epoch {
		if err := r.Clock.SleepUntil(ctx, 0); err != nil {
			return PhaseResult{Name: name, Mode: load.Mode(), Interrupted: true}, nil
		}
		start = 0
	}
	p := &phaseRun{r: r, name: name, load: load, sendCtx: ctx, reqCtx: reqCtx, start: start,
		firstI: -1, firstS: -1}
	p.res = PhaseResult{Name: name, Mode: load.Mode(), TargetRPS: load.Rate, Concurrency: load.Concurrency,
		StartNS: int64(p.start)}
	if load.Requests > 0 {
		p.total = int64(load.Requests + load.WarmupRequests)
	}
	if load.Duration > 0 {
		p.end = p.start + load.WarmupDuration + load.Duration
	}
	if load.Concurrency > 0 {
		p.sem = make(chan struct{}, load.Concurrency)
	}
	var err error
	if load.Mode() == "open" {
		err = p.open()
	} else {
		p.closed()
	}
	p.wg.Wait()
	p.res.EndNS = int64(r.Clock.Now())
	p.res.Interrupted = ctx.Err() != nil
	p.summarize()
	return p.res, err
}

// prepare hands a built request to the runner's Prepare.
func (p *phaseRun) prepare(req *workload.Request) {
	if p.r.Prepare != nil {
		p.r.Prepare(p.sendCtx, req)
	}
}

// ticket reserves the next request of the phase; ok is false when the
// phase has sent all it should.
func (p *phaseRun) ticket() (n int64, ok bool) {
	n = p.tickets.Add(1)
	if p.total > 0 && n > p.total {
		return n, false
	}
	return n, true
}

func (p *phaseRun) isWarmup(ticket int64, intended time.Duration) bool {
	l := p.load
	return ticket <= int64(l.WarmupRequests) || intended-p.start < l.WarmupDuration
}

// open sends sessions at the arrival process's instants; a shard walks
// every arrival and sends those it owns (arrival k carries session k).
func (p *phaseRun) open() error {
	l := p.load
	var arr workload.Arrivals
	if l.Arrivals != nil {
		arr = l.Arrivals()
	} else {
		a, err := workload.NewArrivals(l.Arrival, l.Rate, l.Burstiness, l.Seed)
		if err != nil {
			return err
		}
		arr = a
	}
	for {
		off, ok := arr.Next()
		if !ok {
			return nil
		}
		at := p.start + off
		if p.end > 0 && at >= p.end {
			return nil
		}
		if p.total > 0 && p.tickets.Load() >= p.total {
			return nil
		}
		k := p.r.session.Add(1) - 1
		if !l.Shard.Owns(k) {
			continue
		}
		// Build the request before its instant, so that building it is not
		// part of the client's lateness.
		sess := p.r.Source.Session(k)
		first, ok := sess.Next(0)
		if !ok {
			continue
		}
		p.prepare(&first)
		if err := p.r.Clock.SleepUntil(p.sendCtx, at); err != nil {
			return nil
		}
		t, ok := p.ticket()
		if !ok {
			return nil
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.session(p.reqCtx, sess, &first, t, at, true)
		}()
	}
}

// closed runs Concurrency workers, each sending its next session's turns
// back to back; a shard's j-th session is the workload's Shard.Session(j).
// With a ramp-up, worker w waits for its start (rampStarts) and its first
// request is meant for that instant (its lateness is send lag).
func (p *phaseRun) closed() {
	starts := p.rampStarts()
	for w := range p.load.Concurrency {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer starts.release(w + 1) // a worker that stops lets the next one start and stop
			at, ok := starts.wait(p, w)
			if !ok {
				return
			}
			ramped := p.load.RampUp > 0 || p.load.RampFirstToken
			for p.sendCtx.Err() == nil {
				if p.end > 0 && p.r.Clock.Now() >= p.end {
					return
				}
				t, ok := p.ticket()
				if !ok {
					return
				}
				sess := p.r.Source.Session(p.load.Shard.Session(p.r.session.Add(1) - 1))
				first, ok := sess.Next(0)
				if !ok {
					continue
				}
				p.prepare(&first)
				if !ramped {
					at = p.r.Clock.Now()
				}
				ctx := p.reqCtx
				if ramped {
					ctx = starts.next(ctx, w)
				}
				p.session(ctx, sess, &first, t, at, ramped)
				starts.release(w + 1) // its answer ended without a token, or none was sent
				ramped = false
			}
		}()
	}
}

// rampStarts are a first-token ramp-up's start signals: worker w+1 starts
// when worker w's first request brings its first token (or ends without
// one); nil without that ramp-up.
type rampStarts []chan struct{}

func (p *phaseRun) rampStarts() rampStarts {
	if !p.load.RampFirstToken {
		return nil
	}
	s := make(rampStarts, p.load.Concurrency+1)
	for i := range s {
		s[i] = make(chan struct{})
	}
	close(s[0])
	return s
}

// wait waits for worker w's start and returns it as the first request's
// intended instant: a span's share of the ramp-up (Load.Start), or the
// instant the previous worker's first token arrived; ok is false when
// the phase stopped sending first.
func (s rampStarts) wait(p *phaseRun, w int) (at time.Duration, ok bool) {
	if s != nil {
		select {
		case <-s[w]:
			return p.r.Clock.Now(), true
		case <-p.sendCtx.Done():
			return 0, false
		}
	}
	at = p.start + p.load.Start(w)
	if p.load.RampUp > 0 && p.r.Clock.SleepUntil(p.sendCtx, at) != nil {
		return 0, false
	}
	return at, true
}

// next is ctx with a first-token hook that starts worker w+1.
func (s rampStarts) next(ctx context.Context, w int) context.Context {
	if s == nil {
		return ctx
	}
	return withFirstToken(ctx, func() { s.release(w + 1) })
}

// release starts worker w (once).
func (s rampStarts) release(w int) {
	if s == nil || w >= len(s) {
		return
	}
	select {
	case <-s[w]:
	default:
		close(s[w])
	}
}

// session sends a session's turns, the first (already built) with ticket t
// at instant at.
func (p *phaseRun) session(ctx context.Context, sess workload.Session, first *workload.Request, t int64, at time.Duration, scheduled bool) {
	st := p.agentTrace(sess)
	var last *latency.Record
	if st.end != nil {
		defer func() { st.end(last) }()
	}
	prevOut, prevEnd := 0, int64(0)
	for turn := 0; ; turn++ {
		req := *first
		if turn > 0 {
			var ok bool
			if req, ok = sess.Next(prevOut); !ok {
				return
			}
			p.prepare(&req)
		}
		if turn > 0 {
			var ok bool
			if t, ok = p.ticket(); !ok {
				return
			}
			// The next turn is meant for think time after the answer ended.
			at = max(p.r.Clock.Now(), time.Duration(prevEnd)) + req.Think
			if p.end > 0 && at >= p.end {
				return
			}
			if req.Think > 0 {
				if p.r.Clock.SleepUntil(p.sendCtx, at) != nil {
					return
				}
			}
		} else if p.sendCtx.Err() != nil {
			return
		}
		if turn == 0 && st.start != nil {
			ctx = st.start(ctx, req.Session, at)
		}
		rec, results := p.one(ctx, &req, t, at, scheduled && turn == 0)
		if rec == nil {
			return
		}
		last = rec
		if !rec.OK() {
			return // a session does not go on after a failed turn
		}
		if ts, ok := sess.(workload.ToolSession); ok {
			ts.ToolResults(results)
		}
		prevOut, prevEnd = rec.OutputTokens, rec.ToolsEnd()
	}
}

// sessionTrace starts an agent session's span (Runner.Agents) and ends it
// with the session's last record (nil: none was sent); its functions are
// nil for a session not traced.
type sessionTrace struct {
	start func(ctx context.Context, session int64, at time.Duration) context.Context
	end   func(last *latency.Record)
}

// agentTrace is how sess is traced: an agent session's invoke_agent span
// starts at its first step's intended instant and ends with its last
// step's tool calls (or its failure).
func (p *phaseRun) agentTrace(sess workload.Session) (st sessionTrace) {
	a := p.r.Agents
	if _, agent := sess.(workload.ToolSession); !agent || a == nil {
		return st
	}
	var end func(int64, latency.ErrorKind)
	st.start = func(ctx context.Context, session int64, at time.Duration) context.Context {
		ctx, end = a.session(ctx, session, int64(at))
		return ctx
	}
	st.end = func(last *latency.Record) {
		if end == nil {
			return // never started
		}
		if last == nil { // stopped before its first step was sent
			end(int64(p.r.Clock.Now()), latency.FailCanceled)
			return
		}
		endNS := last.ToolsEnd()
		if endNS == 0 {
			endNS = int64(p.r.Clock.Now())
		}
		end(endNS, last.ErrorKind)
	}
	return st
}

// one sends a request meant for instant at, makes the tool calls its
// answer asks for, and emits its record; nil when the run stopped before
// it could be sent. results are the tool calls' results.
func (p *phaseRun) one(ctx context.Context, req *workload.Request, t int64, at time.Duration, scheduled bool) (rec *latency.Record, results []string) {
	seq := p.r.seq.Add(1)
	rec = &latency.Record{
		ID:                 p.r.RunID + "-" + strconv.FormatInt(seq, 10),
		Seq:                seq,
		IntendedNS:         int64(at),
		Phase:              p.name,
		Session:            req.Session,
		Turn:               req.Turn,
		Steps:              req.Steps,
		SharedPrefixTokens: req.SharedPrefixTokens,
		PrefixBlocks:       req.PrefixBlocks,
		PrefixBlockTokens:  req.PrefixBlockTokens,
		Warmup:             p.isWarmup(t, at),
	}
	held := false
	if p.sem != nil && p.load.Mode() == "open" {
		select {
		case p.sem <- struct{}{}:
		default:
			held = true
			select {
			case p.sem <- struct{}{}:
			case <-p.sendCtx.Done():
				return nil, nil
			}
		}
		defer func() { <-p.sem }()
	}
	if b := p.r.Board; b != nil {
		b.Sent()
	}
	if l := p.r.late; l != nil {
		l.begin()
		defer l.end()
	}
	// A Doer that failed before it stamped the send (or stamped the
	// clock's zero) gets the instant it was called, not the instant it
	// returned: the clock may have moved on meanwhile.
	called := int64(p.r.Clock.Now())
	p.r.Doer.Do(ctx, req, rec)
	if rec.SentNS == 0 {
		rec.SentNS = called
	}
	if len(req.Tools) > 0 && rec.OK() {
		results = p.tools(ctx, req, rec)
	}
	p.note(rec, scheduled && !held)
	p.r.mu.Lock()
	p.r.Emit(rec)
	p.r.mu.Unlock()
	return rec, results
}

// tools makes a step's tool calls into its record; a failed call fails
// the step with the call's error kind (canceled when the run stopped).
func (p *phaseRun) tools(ctx context.Context, req *workload.Request, rec *latency.Record) []string {
	rec.ToolsParallel = req.Parallel
	if p.r.Tools == nil {
		rec.ErrorKind, rec.Error = latency.FailTool, fmt.Sprintf("step %d: no tool endpoint", req.Turn)
		return nil
	}
	spans, results, err := p.r.Tools.Step(ctx, req.Session, req.Turn, req.Tools, req.Parallel)
	rec.Tools = spans
	if p.r.Agents != nil {
		p.r.Agents.tools(ctx, req.Session, req.Turn, spans)
	}
	if err == nil {
		return results
	}
	rec.ErrorKind, rec.Error = latency.FailTool, err.Error()
	for _, s := range spans {
		if s.ErrorKind != "" {
			rec.ErrorKind = s.ErrorKind
			break
		}
	}
	if p.reqCtx.Err() != nil {
		rec.ErrorKind = latency.FailCanceled
	}
	return nil
}

// note accumulates the schedule statistics of a finished request.
func (p *phaseRun) note(rec *latency.Record, scheduled bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.res.Sent++
	p.res.Finished++
	if rec.Warmup {
		p.res.Warmup++
		return
	}
	p.measured++
	if rec.OK() {
		p.res.Succeeded++
		p.lastE = max(p.lastE, rec.EndNS)
		if p.firstE == 0 || rec.EndNS < p.firstE {
			p.firstE = rec.EndNS
		}
	}
	if p.firstI < 0 || rec.IntendedNS < p.firstI {
		p.firstI = rec.IntendedNS
	}
	p.lastI = max(p.lastI, rec.IntendedNS)
	if p.firstS < 0 || rec.SentNS < p.firstS {
		p.firstS = rec.SentNS
	}
	p.lastS = max(p.lastS, rec.SentNS)
	if scheduled {
		lag := max(int64(rec.ClientQueue()), 0)
		p.lags.Add(lag)
		p.lagMax = max(p.lagMax, lag)
	}
}

func (p *phaseRun) summarize() {
	if p.measured >= 2 {
		if d := p.lastI - p.firstI; d > 0 {
			p.res.ScheduledRPS = float64(p.measured-1) / (float64(d) / 1e9)
		}
		if d := p.lastS - p.firstS; d > 0 {
			p.res.AchievedRPS = float64(p.measured-1) / (float64(d) / 1e9)
		}
	}
	if d := p.lastE - p.firstI; p.res.Succeeded > 0 && d > 0 {
		p.res.ThroughputRPS = float64(p.res.Succeeded) / (float64(d) / 1e9)
	}
	if d := p.lastE - p.firstE; p.res.Succeeded > 1 && d > 0 {
		p.res.CompletionRPS = float64(p.res.Succeeded-1) / (float64(d) / 1e9)
	}
	if p.lags.Count() > 0 {
		lag, _ := p.lags.Percentiles(50, 99)
		p.res.SendLagP50MS, p.res.SendLagP99MS = ms(lag[0]), ms(lag[1])
		p.res.SendLagMaxMS = float64(p.lagMax) / 1e6
	}
}

// firstTokenKey carries a request's first-token hook in its context.
type firstTokenKey struct{}

// withFirstToken is ctx with f to call, in the request's goroutine, when
// its answer's first token (or reasoning token) arrives.
func withFirstToken(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, firstTokenKey{}, f)
}

// firstTokenHook is ctx's first-token hook, or nil.
func firstTokenHook(ctx context.Context) func() {
	f, _ := ctx.Value(firstTokenKey{}).(func())
	return f
}
