package simulate

import (
	"errors"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/route"
)

// replica is one engine behind the router, with the state the balancers
// read (route.Replica).
type replica struct {
	index int
	name  string
	pool  *pool
	v     *engine.Virtual
	dirty bool

	outstanding int64
	// stepEnds are the ends of the steps stepBase, stepBase+1, …: the
	// records' token instants (chunk); trimmed when it reaches trimAt.
	stepEnds []int64
	stepBase int64
	trimAt   int
	// The figures of the last scrape.
	waiting, kvUsage float64
	scrapedAt        time.Time
	// prefill: one of Config.PrefillReplicas; wakeAt the pending evWake's
	// instant (-1: none).
	prefill bool
	wakeAt  int64
}

// Name implements route.Replica.
func (r *replica) Name() string { return r.name }

// Outstanding implements route.Replica: requests routed to r and not ended.
func (r *replica) Outstanding() int64 { return r.outstanding }

// Load implements route.Replica with the last scrape's figures.
func (r *replica) Load(now time.Time, maxAge time.Duration) (waiting, kvUsage float64, fresh bool) {
	return r.waiting, r.kvUsage, !r.scrapedAt.IsZero() && now.Sub(r.scrapedAt) <= maxAge
}

// pool is a length pool: its replicas, balancer and admission queue.
type pool struct {
	index    int
	maxInput int
	replicas []*replica
	balancer route.Balancer[*call, *replica]
	adm      *route.Queue[int32]
	hint     func(time.Time) (float64, bool) // the adaptive limit's (route.WaitingHint)
}

func (p *pool) maxInputTokens() int { return p.maxInput }

func virtualTime(at int64) time.Time { return engine.SimEpoch.Add(time.Duration(at)) }

// atRouter is a request reaching the router at now: it picks the pool by
// length, then the pool's admission queue admits, queues or refuses it.
func (s *sim) atRouter(id int32) {
	c := &s.calls[id]
	c.routerAt = s.now
	i := 0
	if len(s.pools) > 1 {
		if i = route.Band(s.pools, (*pool).maxInputTokens, c.inputLen); i < 0 {
			i = len(s.pools) - 1 // longer than every band: the last pool, as the gateway does
		}
	}
	c.pool = s.pools[i]
	adm := c.pool.adm
	if adm == nil || adm.TryAdmit() {
		c.admitAt = s.now
		s.dispatch(id)
		s.drainAdmitted()
		return
	}
	a := s.cfg.Admission
	var deadline time.Time
	if a.DeadlineTTFT > 0 {
		deadline = virtualTime(sat(s.now, int64(a.DeadlineTTFT)))
	}
	t, err := adm.Enqueue(virtualTime(s.now), 0, deadline, a.EarlyReject, id)
	if err != nil {
		s.refuse(id, 429, latency.FailRateLimited, err)
		return
	}
	c.waiting = t
	if a.EarlyReject && !deadline.IsZero() {
		c.deadline = int64(engine.Offset(deadline))
		s.ev.push(c.deadline, evExpire, id)
	}
}

// expire is a queued request's deadline: still waiting, it is refused.
func (s *sim) expire(id int32) {
	c := &s.calls[id]
	if c.waiting == nil || c.deadline != s.now || !c.pool.adm.Abandon(c.waiting) {
		return
	}
	c.waiting = nil
	s.refuse(id, 429, latency.FailRateLimited, route.ErrDeadlineExpired)
}

// drainAdmitted dispatches the requests an admission queue admitted while
// a slot was released or its limit rose.
func (s *sim) drainAdmitted() {
	for len(s.admitting) > 0 {
		id := s.admitting[0]
		s.admitting = s.admitting[1:]
		c := &s.calls[id]
		c.waiting = nil
		c.admitAt = s.now
		s.dispatch(id)
	}
	s.admitting = s.admitting[:0]
}

// dispatch sends an admitted request to the replica the balancer picks.
func (s *sim) dispatch(id int32) {
	c := &s.calls[id]
	if s.prefill != nil && !c.prefilled {
		s.dispatchPrefill(id)
		return
	}
	r := c.pool.balancer.Pick(c, c.pool.replicas)
	c.replica = r
	s.res.Replicas[r.index].Requests++
	r.outstanding++ // the replica has it from its pick, as the balancer counts
	c.frontNS = 0
	if fe := int64(s.cfg.FrontEnd); fe > 0 {
		// A delay per request, taken by every request at once: the engine
		// sees the request when it has passed.
		c.frontNS = fe
		s.ev.push(s.now+fe, evFrontEnd, id)
		return
	}
	s.submit(id)
}

// submit hands a request to its replica's engine (after the replica's
// front end, when it has one).
func (s *sim) submit(id int32) {
	c := &s.calls[id]
	r := c.replica
	c.req.RemotePrefill, c.req.RemoteTP = s.prefill != nil, s.prefillTP
	if _, err := r.v.Submit(time.Duration(s.now), int(id), &c.req); err != nil {
		r.outstanding--
		if adm := c.pool.adm; adm != nil {
			if errors.Is(err, engine.ErrQueueFull) {
				adm.ObserveDrop(virtualTime(s.now)) // a 429 or 503: overload, as the gateway counts it
			}
			adm.Release(time.Duration(s.now - c.admitAt))
		}
		switch {
		case errors.Is(err, engine.ErrQueueFull):
			kind := latency.FailRateLimited
			if s.cfg.QueueFullStatus >= 500 {
				kind = latency.FailHTTP5xx
			}
			s.refuse(id, s.cfg.QueueFullStatus, kind, err)
		default: // ErrPromptTooLong, ErrInvalid: serve answers 400
			s.refuse(id, 400, latency.FailHTTP4xx, err)
		}
		return
	}
	// An idle replica starts a step at once with what it holds, as the
	// wall-clock engine's step loop wakes on its first request: requests
	// sent at the same instant reach a real server one after another, and
	// those after the first wait for the next step.
	if !s.startStep(r) {
		s.touch(r)
	}
}

// stepEnd applies a replica's step: tokens stream to their clients,
// finished requests free their replica and admission slots.
func (s *sim) stepEnd(r *replica) {
	if r.prefill {
		s.prefillEnd(r)
		return
	}
	outs := r.v.Finish()
	step := r.stepBase + int64(len(r.stepEnds))
	if !s.cfg.NoTokenTimes {
		if len(r.stepEnds) >= r.trimAt {
			s.trimSteps(r)
		}
		r.stepEnds = append(r.stepEnds, s.now)
	}
	for i := range outs {
		o := &outs[i]
		id := int32(o.ID())
		c := &s.calls[id]
		at := s.now + c.net
		if o.Tokens > 0 {
			if !c.first {
				c.first = true
				c.rec.FirstTokenNS, c.rec.FirstByteNS = at, at
				c.chunkFrom = step
				s.rampOn(c, at)
				if adm := c.pool.adm; adm != nil {
					adm.ObserveFirstToken(virtualTime(s.now), time.Duration(s.now-c.admitAt), c.pool.hint)
				}
			}
			if !s.cfg.NoTokenTimes {
				s.chunk(c, r, step, at, o.Tokens)
			}
		}
		if o.Finish == "" {
			continue
		}
		if !s.cfg.NoTokenTimes && !c.explicit {
			s.materialize(c, r)
		}
		s.finish(c, o.Timeline(), at)
		r.outstanding--
		if adm := c.pool.adm; adm != nil {
			adm.Release(time.Duration(s.now - c.admitAt))
		}
		s.deliver(id, at)
	}
	// The replica plans its next step at once, from the requests it holds
	// now, as a serving engine's step loop does: whatever this step's
	// tokens cause — a closed-loop client's next request, a session's next
	// turn, a request the admission queue lets through on a release —
	// reaches it later (a handler, a network, a client in between) and
	// waits for the step after. Admitting those into the step that starts
	// at this same instant would let a response's successor overtake the
	// step boundary no real client can, and lock closed loops into waves
	// (docs/simulate.md, "Step boundaries").
	if !s.startStep(r) {
		s.touch(r)
	}
	s.drainAdmitted()
}

// chunk records a stream event of tokens at the client instant at, the
// end of the replica's step number step. While a request emits one token
// in every step from its first, its events are the replica's step ends
// from chunkFrom on, and only their count is kept (materialize copies
// them out at the end); an event that breaks the run (a step without a
// token, after a preemption; several tokens, under speculative decoding)
// turns the record explicit. As bench does, ChunkTokens stays nil while
// every event carries one token (Record.ITLs' default).
func (s *sim) chunk(c *call, r *replica, step, at int64, tokens int) {
	if !c.explicit {
		if tokens == 1 && step == c.chunkFrom+int64(c.nChunks) {
			c.nChunks++
			return
		}
		s.materialize(c, r)
		c.explicit = true
	}
	rec := c.rec
	if tokens != 1 && rec.ChunkTokens == nil {
		rec.ChunkTokens = make([]int32, len(rec.ChunkNS), max(c.req.MaxTokens, len(rec.ChunkNS)+1))
		for i := range rec.ChunkTokens {
			rec.ChunkTokens[i] = 1
		}
	}
	rec.ChunkNS = append(rec.ChunkNS, at)
	if rec.ChunkTokens != nil {
		rec.ChunkTokens = append(rec.ChunkTokens, int32(tokens))
	}
}

// materialize writes the request's run of one-token events, the replica's
// step ends chunkFrom … chunkFrom+nChunks−1, into its record's ChunkNS.
func (s *sim) materialize(c *call, r *replica) {
	rec := c.rec
	if cap(rec.ChunkNS) < c.req.MaxTokens {
		rec.ChunkNS = make([]int64, 0, c.req.MaxTokens) // the most events an answer can have
	}
	from := c.chunkFrom - r.stepBase
	for _, t := range r.stepEnds[from : from+int64(c.nChunks)] {
		rec.ChunkNS = append(rec.ChunkNS, t+c.net)
	}
}

// trimSteps drops the step ends no request's run of events still needs,
// so the log spans the requests in flight, not the whole run.
func (s *sim) trimSteps(r *replica) {
	keep := r.stepBase + int64(len(r.stepEnds))
	for i := range s.calls {
		if c := &s.calls[i]; c.replica == r && c.first && !c.explicit && c.rec != nil {
			keep = min(keep, c.chunkFrom)
		}
	}
	n := copy(r.stepEnds, r.stepEnds[keep-r.stepBase:])
	r.stepEnds = r.stepEnds[:n]
	r.stepBase = keep
	r.trimAt = max(2*n, minStepLog)
}

// minStepLog is the step-end log's length below which it is not trimmed.
const minStepLog = 4096

// finish completes a successful record from the engine's timeline; the
// client sees every instant its network latency later (at is the end there).
func (s *sim) finish(c *call, tl engine.Timeline, at int64) {
	rec := c.rec
	rec.EndNS, rec.LastEventNS = at, at
	rec.Status = 200
	rec.InputTokens, rec.InputSource = tl.PromptTokens, latency.SourceUsage
	rec.OutputTokens, rec.OutputSource = tl.OutputTokens, latency.SourceUsage
	rec.CachedTokens = tl.CachedTokens
	if tl.ReasoningTokens > 0 {
		splitReasoning(rec, tl.ReasoningTokens)
	}
	rec.FinishReason = string(tl.Finish)
	if c.prefilled {
		// Disaggregated: the two instances' stages, as the gateway passes
		// them on (no single server split).
		rec.Timing = pdTiming(rec.Timing, c.preTL, tl)
		rec.InputTokens = c.preTL.PromptTokens
		rec.CachedTokens = c.preTL.CachedTokens
	} else {
		sp := c.split
		if sp == nil {
			sp = new(latency.ServerSplit)
		}
		*sp = latency.ServerSplit{QueueNS: int64(tl.Queue()), PrefillNS: int64(tl.Prefill()),
			DecodeNS: int64(tl.Decode()), Source: SplitSource}
		rec.Server = sp
		if c.frontNS > 0 {
			// The front end: a stage of its own, before the engine's queue.
			rec.Timing = append(rec.Timing, latency.HopStage{Hop: latency.HopServer, Name: string(latency.TimingFrontend), NS: c.frontNS})
		}
	}
	if c.pool.adm != nil {
		rec.GatewayNS = c.admitAt - c.routerAt
	}
}

// splitReasoning makes the first n output tokens of a finished record
// reasoning, as bench reads a reasoning model's stream from serve: their
// events become OtherNS (FirstReasonNS the first), the answer's first
// token is FirstTokenNS, and OutputTokens counts the answer alone. An event
// holding the last reasoning tokens and the first answer tokens is two
// events at one instant, as serve writes it. Without token instants
// (Config.NoTokenTimes) the first answer token is placed n steps of the
// request's mean decode step after its first token.
func splitReasoning(rec *latency.Record, n int) {
	total := rec.OutputTokens
	rec.ReasoningTokens, rec.OutputTokens = n, total-n
	rec.FirstReasonNS = rec.FirstTokenNS
	if len(rec.ChunkNS) == 0 {
		rec.FirstTokenNS = 0
		if total > n && total > 1 {
			rec.FirstTokenNS = rec.FirstReasonNS + int64(n)*(rec.EndNS-rec.FirstReasonNS)/int64(total-1)
		}
		return
	}
	left, i := n, 0
	for ; i < len(rec.ChunkNS) && left > 0; i++ {
		k := 1
		if rec.ChunkTokens != nil {
			k = int(rec.ChunkTokens[i])
		}
		rec.OtherNS = append(rec.OtherNS, rec.ChunkNS[i])
		if k > left { // the event also holds answer tokens: it stays, with those
			rec.ChunkTokens[i] = int32(k - left)
			break
		}
		left -= k
	}
	rec.ChunkNS = rec.ChunkNS[i:]
	if rec.ChunkTokens != nil {
		rec.ChunkTokens = rec.ChunkTokens[i:]
	}
	rec.FirstTokenNS = 0
	if len(rec.ChunkNS) > 0 {
		rec.FirstTokenNS = rec.ChunkNS[0]
	}
}

// SplitSource marks the server split of a simulated request.
const SplitSource = "simulated"

// refuse answers a request with an error status at now; the client reads
// it its network latency later.
func (s *sim) refuse(id int32, status int, kind latency.ErrorKind, err error) {
	c := &s.calls[id]
	rec := c.rec
	at := s.now + c.net
	rec.Status, rec.ErrorKind = status, kind
	rec.Error = statusText(status) + ": " + err.Error()
	rec.FirstByteNS = at
	s.res.Rejected++
	s.deliver(id, at)
}

// deliver has the response reach the client at the instant at (an event
// even at now: a refusal answered at once must not recurse into the
// client's next request).
func (s *sim) deliver(id int32, at int64) { s.ev.push(at, evResponse, id) }

func statusText(status int) string {
	switch status {
	case 400:
		return "400 Bad Request"
	case 429:
		return "429 Too Many Requests"
	case 503:
		return "503 Service Unavailable"
	}
	return itoa(int64(status))
}
