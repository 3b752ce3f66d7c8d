package engine

import (
	"fmt"
	"time"
)

// Virtual is one engine on a virtual clock, stepped by its caller: the
// building block of discrete-event simulations that drive several engines,
// or feed an engine from a closed loop, on one shared clock. Simulate is
// Virtual driven over a fixed list of arrivals.
//
// The caller owns time. It submits requests at their arrival instants, asks
// Start to plan a step at an instant when the engine is idle, and calls
// Finish at that step's end to apply it and collect the tokens emitted.
// Instants are virtual offsets from SimEpoch and never go backwards. The
// engine never sleeps and never reads a clock; the same configuration and
// the same calls give the same results.
//
// A Virtual is not safe for concurrent use.
type Virtual struct {
	cfg  Config
	s    *scheduler
	busy bool
	now  int64 // start of the step in progress, or of the last one
	end  int64 // end of the step in progress
	live int   // requests submitted and not finished

	free    []*request // recycled request states
	retired []*request // finished at the last Finish; free from the next
}

// Handle names a submitted request, for Abort.
type Handle struct {
	r   *request
	seq uint64
}

// Output is one request's tokens from one step.
type Output struct {
	r *request
	// Tokens emitted at the step's end (a prefill's first token, a decode,
	// 1 + accepted drafts), or 0 for an abort's final output.
	Tokens int
	// Finish is set on the request's last output.
	Finish FinishReason
}

// ID is the id given to Submit (Virtual) or the arrival's index.
func (o *Output) ID() int { return o.r.idx }

// Timeline is the request's server-side timeline as of this output
// (complete on its last), with instants from SimEpoch.
func (o *Output) Timeline() Timeline { return o.r.timeline(SimEpoch) }

// NewVirtual returns an idle engine for cfg (defaults filled in, then
// validated).
func NewVirtual(cfg Config) (*Virtual, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Virtual{cfg: cfg, s: newScheduler(cfg)}, nil
}

// Config returns the engine's configuration with defaults filled in.
func (v *Virtual) Config() Config { return v.cfg }

// Submit validates q and queues it as arriving at the offset at (not before
// the last step's start). id is echoed in the request's outputs. The
// errors are Submit's on the wall-clock engine: ErrInvalid,
// ErrPromptTooLong (a *LengthError) and ErrQueueFull when MaxWaiting
// requests already wait. A request arriving during a step waits for the
// next one.
func (v *Virtual) Submit(at time.Duration, id int, q *Request) (Handle, error) {
	if int64(at) < v.now {
		return Handle{}, fmt.Errorf("engine: request %q submitted at %v, before the engine's current step at %v", q.ID, at, time.Duration(v.now))
	}
	if err := validate(q, v.cfg); err != nil {
		return Handle{}, err
	}
	if v.cfg.MaxWaiting > 0 && v.s.numWaiting() >= v.cfg.MaxWaiting {
		return Handle{}, fmt.Errorf("%w (%d waiting)", ErrQueueFull, v.cfg.MaxWaiting)
	}
	var r *request
	if n := len(v.free); n > 0 {
		r = v.free[n-1]
		v.free = v.free[:n-1]
	} else {
		r = new(request)
	}
	v.s.initRequest(r, q, int64(at))
	r.idx = id
	v.s.add(r)
	v.live++
	return Handle{r: r, seq: r.seq}, nil
}

// Abort ends the request with FinishAbort at the offset at (not during a
// step: call it between Finish and Start). It reports whether the request
// was still live; its final output is not emitted, so the caller reads its
// timeline from the returned value when ok.
func (v *Virtual) Abort(h Handle, at time.Duration) (Timeline, bool) {
	r := h.r
	if r == nil || r.seq != h.seq || r.state == stDone || v.busy {
		return Timeline{}, false
	}
	if !v.s.abort(r, int64(at)) {
		return Timeline{}, false
	}
	v.s.compactRunning()
	v.live--
	// Not recycled: an aborted waiting request stays in the waiting queue
	// until the queue drops it lazily.
	return r.timeline(SimEpoch), true
}

// Busy reports whether a step is in progress, and when it ends.
func (v *Virtual) Busy() (end time.Duration, busy bool) { return time.Duration(v.end), v.busy }

// NextReady is the offset at which the earliest KV transfer in flight
// ends (a RemotePrefill request's pull): an idle engine that Start
// found nothing to compute for has work again then.
func (v *Virtual) NextReady() (time.Duration, bool) {
	at, ok := v.s.nextReady()
	return time.Duration(at), ok
}

// Live is the number of requests submitted and not yet finished.
func (v *Virtual) Live() int { return v.live }

// Start plans a step at the offset now on an idle engine and returns its
// end; ok is false when there is nothing to compute (or a step is already
// in progress).
func (v *Virtual) Start(now time.Duration) (end time.Duration, ok bool) {
	if v.busy {
		return 0, false
	}
	dur, ok := v.s.schedule(int64(now))
	if !ok {
		return 0, false
	}
	v.busy = true
	v.now = int64(now)
	v.end = int64(now) + int64(dur)
	return time.Duration(v.end), true
}

// LastStep describes the step Start just planned (call it before Finish).
func (v *Virtual) LastStep() StepRecord {
	s := v.s
	rec := StepRecord{Start: time.Duration(v.now), Duration: time.Duration(v.end - v.now), Seqs: len(s.plan),
		Running: len(s.running), Waiting: s.numWaiting(), UsedBlocks: s.kv.used(), Preempted: s.nPreempt}
	for _, p := range s.plan {
		if p.decode {
			rec.DecodeSeqs++
		} else {
			rec.PrefillTokens += p.n
		}
	}
	return rec
}

// EachPrefill calls f for every request whose prompt the planned step
// computes, with the tokens it computes (call it before Finish).
func (v *Virtual) EachPrefill(f func(id, tokens int)) {
	for _, p := range v.s.plan {
		if !p.decode {
			f(p.r.idx, p.n)
		}
	}
}

// Finish applies the step in progress at its end and returns the tokens
// it emitted, one Output per request that emitted (valid until the next
// call to Finish or Abort).
func (v *Virtual) Finish() []Output {
	if !v.busy {
		return nil
	}
	v.free = append(v.free, v.retired...)
	clear(v.retired)
	v.retired = v.retired[:0]
	v.busy = false
	v.s.complete(v.end)
	for i := range v.s.emits {
		if m := &v.s.emits[i]; m.Finish != "" {
			v.live--
			v.retired = append(v.retired, m.r)
		}
	}
	return v.s.emits
}

// Stats returns the engine's state and counters now.
func (v *Virtual) Stats() Stats {
	s := v.s
	return Stats{
		Running:          len(s.running),
		Waiting:          s.numWaiting() + s.numTransfers(),
		KVUsage:          float64(s.kv.used()) / float64(v.cfg.NumBlocks),
		PrefixQueries:    s.prefixQueries,
		PrefixHits:       s.prefixHits,
		Preemptions:      s.preemptions,
		NumBlocks:        v.cfg.NumBlocks,
		BlockSize:        v.cfg.BlockSize,
		Steps:            s.steps,
		PromptTokens:     s.promptTokens,
		GenerationTokens: s.genTokens,
	}
}
