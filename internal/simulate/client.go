package simulate

import (
	"fmt"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/route"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// call is one request from the client's send to the response's end.
type call struct {
	rec     *latency.Record
	split   *latency.ServerSplit // a recycled record's, for finish to reuse
	sess    workload.Session     // nil: a single request (or lengths only)
	session int64
	turn    int
	ticket  int64
	worker  int32 // closed-loop worker, or -1
	ramp    bool  // its first token (or its end) starts the next worker (first-token ramp-up)
	think   time.Duration

	req      engine.Request
	key      uint64  // prefix-affinity key
	inputLen int     // the request's input tokens, for length pools
	shared   int     // its first tokens the workload shares with others (Record.SharedPrefixTokens)
	blocks   []int64 // its prompt's leading blocks (Record.PrefixBlocks), of blockLen tokens
	blockLen int

	pool    *pool
	replica *replica
	// A disaggregated deployment's prefill half: its replica, and its
	// timeline once done (prefilled).
	pre       *replica
	preTL     engine.Timeline
	prefilled bool
	waiting   *route.Ticket[int32] // in the admission queue
	deadline  int64                // when its wait expires (early reject)
	routerAt  int64                // reached the router
	admitAt   int64                // left the admission queue
	first     bool                 // its first token was seen
	// Token instants: a run of nChunks one-token events at the replica's
	// step ends from chunkFrom, until explicit (see chunk).
	chunkFrom int64
	nChunks   int32
	explicit  bool
	// frontNS is its time in its replica's front end (Config.FrontEnd),
	// waiting and served.
	frontNS int64
	// net is its one-way network latency, both ways (Config.Network, or
	// its draw from Config.NetworkSample).
	net int64
}

// AffinityKey implements route.Request.
func (c *call) AffinityKey() uint64 { return c.key }

// maxSameInstant bounds the requests sent at one virtual instant: a closed
// loop whose requests are all refused at once would otherwise never let
// time advance.
const maxSameInstant = 100_000

// startLoad schedules the first sends: the first open-loop arrival, or
// every closed-loop worker's first session.
func (s *sim) startLoad() error {
	l := s.load
	if l.Requests > 0 {
		s.total = int64(l.Requests + l.WarmupRequests)
	}
	if l.Duration > 0 {
		s.end = int64(l.WarmupDuration + l.Duration)
	}
	if ls, ok := s.cfg.Workload.(workload.LengthSource); ok && !(s.cfg.Engine.EnablePrefixCaching && sharesPrefixes(ls)) {
		// A trace whose rows share no prompt prefix (or an engine that
		// caches none): its lengths are all the engine needs.
		s.lengths = ls
	}
	if l.Mode() == "open" {
		s.capacity = l.Concurrency
		if l.Arrivals != nil {
			s.arrivals = l.Arrivals()
		} else {
			a, err := workload.NewArrivals(l.Arrival, l.Rate, l.Burstiness, l.Seed)
			if err != nil {
				return err
			}
			s.arrivals = a
		}
		s.nextArrival()
		return nil
	}
	s.rampWait = -1
	if l.RampFirstToken {
		s.rampNext, s.rampWait = 1, 0
		s.workerNext(0)
		return nil
	}
	for w := range l.Concurrency {
		if at := l.Start(w); at > 0 {
			s.ev.push(int64(at), evStart, int32(w)) // ramp-up: bench's worker w starts then
			continue
		}
		s.workerNext(int32(w))
	}
	return nil
}

// nextArrival schedules the open loop's next arrival, if it is to be sent.
func (s *sim) nextArrival() {
	off, ok := s.arrivals.Next()
	if !ok {
		return
	}
	at := int64(off)
	if s.stopped || s.end > 0 && at >= s.end || s.total > 0 && s.tickets >= s.total {
		return
	}
	s.ev.push(max(at, s.now), evArrival, 0)
}

// arrive sends the open loop's next session.
func (s *sim) arrive() {
	defer s.nextArrival()
	if s.total > 0 && s.tickets >= s.total {
		return
	}
	id, ok := s.startSession(-1)
	if !ok {
		return
	}
	s.tickets++
	s.calls[id].ticket = s.tickets
	s.send(id)
}

// workerNext starts closed-loop worker w's next session, if the run goes on.
func (s *sim) workerNext(w int32) {
	for {
		if s.stopped || s.end > 0 && s.now >= s.end {
			return
		}
		if s.total > 0 && s.tickets >= s.total {
			return
		}
		s.tickets++
		t := s.tickets
		id, ok := s.startSession(w)
		if !ok {
			continue
		}
		s.calls[id].ticket = t
		if s.rampWait == w {
			s.calls[id].ramp, s.rampWait = true, -1
		}
		if d := s.turnaround(s.sessions - 1); d > 0 {
			// a replayed closed loop: the client's measured turnaround
			// between its previous answer's end and this send
			s.ev.push(s.now+int64(d), evSend, id)
			return
		}
		s.send(id)
		return
	}
}

// turnaround is how long a closed-loop worker waits after its previous
// answer before it sends session n: the measured client's turnaround a
// replay carries (workload.TurnaroundSource: simulate --like), else 0.
func (s *sim) turnaround(n int64) time.Duration {
	if ts, ok := s.cfg.Workload.(workload.TurnaroundSource); ok {
		return ts.Turnaround(n)
	}
	return 0
}

// rampOn starts the next worker of a first-token ramp-up at, once c's
// first token (or its end) reached the client, as bench's worker does.
func (s *sim) rampOn(c *call, at int64) {
	if !c.ramp {
		return
	}
	c.ramp = false
	if int(s.rampNext) < s.load.Concurrency {
		s.ev.push(at, evStart, s.rampNext)
		s.rampNext++
	}
}

// startSession builds the first request of the next session; ok is false
// when the session has none.
func (s *sim) startSession(worker int32) (int32, bool) {
	n := s.sessions
	s.sessions++
	id := s.newCall()
	c := &s.calls[id]
	c.worker = worker
	c.think = 0
	if s.lengths != nil {
		in, out := s.lengths.Lengths(n)
		c.session = n
		c.inputLen, c.shared, c.blocks, c.blockLen = in, 0, nil, 0
		if sp, ok := s.lengths.(workload.SharedPrefixSource); ok {
			c.shared = sp.SharedPrefixTokens(n)
		}
		c.req = engine.Request{PromptLen: in, MaxTokens: out, IgnoreEOS: s.cfg.IgnoreEOS}
		if s.cfg.Priority != nil {
			c.req.Priority = s.cfg.Priority(in, out)
		}
		c.key = mix(uint64(n))
		return id, true
	}
	c.sess = s.cfg.Workload.Session(n)
	q, ok := c.sess.Next(0)
	if !ok {
		s.release(id)
		return 0, false
	}
	s.setRequest(c, &q)
	return id, true
}

// setRequest turns a workload request into the engine's, as tokentrace
// serve would tokenize it.
func (s *sim) setRequest(c *call, q *workload.Request) {
	c.session, c.turn, c.think = q.Session, q.Turn, q.Think
	c.inputLen, c.shared = q.InputTokens, q.SharedPrefixTokens
	c.blocks, c.blockLen = q.PrefixBlocks, q.PrefixBlockTokens
	c.req = engine.Request{PromptLen: q.InputTokens, MaxTokens: q.MaxTokens, IgnoreEOS: s.cfg.IgnoreEOS}
	if s.cfg.Priority != nil {
		c.req.Priority = s.cfg.Priority(q.InputTokens, q.MaxTokens)
	}
	if s.cfg.Engine.EnablePrefixCaching {
		if q.Messages != nil {
			c.req.Prompt = tokenizer.EncodeChat(make([]int32, 0, q.InputTokens), q.Messages)
		} else {
			c.req.Prompt = tokenizer.Encode(make([]int32, 0, q.InputTokens), q.Prompt)
		}
	}
	c.key = prefixKey(q, s.cfg.PrefixBytes)
}

// send is a request's intended send instant (now): it is sent, or held
// while the open loop's cap on requests in flight is reached.
func (s *sim) send(id int32) {
	c := &s.calls[id]
	if s.now != s.sameAt {
		s.sameAt, s.sameN = s.now, 0
	}
	if s.sameN++; s.sameN > max(maxSameInstant, 10*s.load.Concurrency) && !s.stopped {
		s.stopped = true
		s.res.Warnings = append(s.res.Warnings, fmt.Sprintf("the load stopped at %v: %d requests were sent at that one instant (is every request refused at once?)", time.Duration(s.now), s.sameN-1))
	}
	s.newRecord(c, s.now)
	s.res.Sent++
	if s.capacity > 0 {
		if s.inFlight >= s.capacity {
			s.held = append(s.held, id)
			return
		}
		s.inFlight++
	}
	s.transmit(id)
}

// transmit puts the request on the network at now.
func (s *sim) transmit(id int32) {
	c := &s.calls[id]
	rec := c.rec
	rec.SentNS, rec.WroteNS = s.now, s.now
	c.net = int64(s.cfg.Network)
	if s.netRng != nil {
		c.net = int64(s.cfg.NetworkSample[s.netRng.IntN(len(s.cfg.NetworkSample))])
	}
	if c.net > 0 {
		s.ev.push(s.now+c.net, evRouter, id)
		return
	}
	s.atRouter(id)
}

// respond is the end of a response (or an error) reaching the client at
// now: the record is emitted and the client sends what follows.
func (s *sim) respond(id int32) {
	c := &s.calls[id]
	rec := c.rec
	if rec.OK() {
		s.res.Succeeded++
		if rec.EndNS > int64(s.res.End) {
			s.res.End = time.Duration(rec.EndNS)
		}
	}
	s.rampOn(c, s.now) // an answer without a token
	if s.emit != nil {
		s.emit(rec)
	}
	c.rec = nil
	if s.cfg.RecycleRecords {
		defer func() { s.spare = append(s.spare, rec) }() // after nextTurn has read it
	}
	if s.capacity > 0 {
		s.inFlight--
		if len(s.held) > 0 {
			next := s.held[0]
			s.held = s.held[1:]
			s.inFlight++
			s.transmit(next)
		}
	}
	s.nextTurn(id, rec)
}

// nextTurn sends the session's next turn after its think time, or ends the
// session (a failed turn ends it too).
func (s *sim) nextTurn(id int32, prev *latency.Record) {
	c := &s.calls[id]
	if c.sess != nil && prev.OK() && !s.stopped && (s.total == 0 || s.tickets < s.total) {
		if q, ok := c.sess.Next(prev.OutputTokens); ok {
			s.tickets++
			c.ticket = s.tickets
			at := max(s.now, prev.EndNS) + int64(q.Think)
			if s.end == 0 || at < s.end {
				s.setRequest(c, &q)
				c.pool, c.replica, c.waiting, c.first = nil, nil, nil, false
				c.chunkFrom, c.nChunks, c.explicit = 0, 0, false
				if at > s.now {
					s.ev.push(at, evSend, id)
				} else {
					s.send(id)
				}
				return
			}
		}
	}
	w := c.worker
	s.release(id)
	if w >= 0 {
		s.workerNext(w)
	}
}

// prefixKey is the request's prefix-affinity key, as the gateway computes
// it from the body it would have received (route.PrefixKey).
func prefixKey(q *workload.Request, n int) uint64 {
	key := route.NewPrefixKey(n)
	if q.Messages == nil {
		key.AddString(q.Prompt)
	}
	for _, m := range q.Messages {
		key.AddString(m.Role)
		key.AddString(m.Content)
	}
	return key.Sum()
}

// mix is the splitmix64 finalizer: a key for a request without text.
func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
