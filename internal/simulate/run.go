package simulate

import (
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/route"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// sim is one simulation's state; everything runs on its goroutine.
type sim struct {
	cfg  Config
	emit Emit
	now  int64 // the instant being processed, ns from the start
	ev   eventHeap

	replicas  []*replica
	pools     []*pool
	prefill   *pool      // a disaggregated deployment's prefill replicas; nil: none
	prefillTP int        // the prefill replicas' TP where their engine is their own (Config.PrefillEngine); 0: the decode replicas'
	dirty     []*replica // given work at this instant

	calls []call
	free  []int32

	// the load generator
	load      workload.Load
	arrivals  workload.Arrivals
	lengths   workload.LengthSource // trace replay: lengths without text
	end       int64                 // stop sending at this instant; 0: no bound
	total     int64                 // warm-up + measured requests; 0: no bound
	tickets   int64
	sessions  int64
	seq       int64 // request ids
	capacity  int   // open loop: the cap on requests in flight; 0: none
	inFlight  int
	held      []int32           // open-loop requests waiting for the cap, FIFO
	rampNext  int32             // first-token ramp-up: the next worker to start
	rampWait  int32             // first-token ramp-up: the worker whose first request starts the next; -1: none
	spare     []*latency.Record // emitted records to reuse (RecycleRecords)
	idBuf     []byte
	admitting []int32 // requests an admission queue just admitted

	sameAt  int64 // the instant of the last send
	sameN   int   // sends at sameAt
	stopped bool  // the load stopped sending

	nextScrape, nextSample int64
	res                    *Result

	netRng *rand.Rand // draws each request's network latency from Config.NetworkSample
}

// sharesPrefixes reports whether the requests of src share prompt prefixes
// a cache could reuse.
func sharesPrefixes(src any) bool {
	sp, ok := src.(workload.SharedPrefixSource)
	return ok && sp.SharesPrefixes()
}

// Run simulates cfg and calls emit with every request's record as it ends
// (in virtual time). It returns an error, naming the setting, only when the
// configuration cannot run; refused and failed requests are records.
func Run(cfg Config, emit Emit) (*Result, error) {
	s, err := newSim(cfg)
	if err != nil {
		return nil, err
	}
	return s.run(emit), nil
}

// newSim checks cfg and builds the simulation without running it: every
// error a configuration can cause is found here.
func newSim(cfg Config) (*sim, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &sim{cfg: cfg, load: cfg.Load, res: &Result{}, nextScrape: int64(cfg.ScrapePhase)}
	if len(cfg.NetworkSample) > 0 {
		s.netRng = rand.New(rand.NewPCG(cfg.NetworkSeed, cfg.NetworkSeed^0x9e3779b97f4a7c15))
	}
	if err := s.build(); err != nil {
		return nil, err
	}
	if err := s.startLoad(); err != nil {
		return nil, err
	}
	return s, nil
}

// run runs the events and returns the result.
func (s *sim) run(emit Emit) *Result {
	s.emit = emit
	s.startSteps() // what startLoad sent at the first instant
	s.loop()
	for i, r := range s.replicas {
		s.res.Replicas[i].Stats = r.v.Stats()
	}
	return s.res
}

// build makes the replicas and pools.
func (s *sim) build() error {
	pools := s.cfg.Pools
	if len(pools) == 0 {
		pools = []Pool{{Replicas: s.cfg.Replicas}}
	}
	now := func() time.Time { return engine.SimEpoch.Add(time.Duration(s.now)) }
	for pi, pc := range pools {
		b, err := route.New[*call, *replica](s.cfg.Balancer, route.Options{
			MaxAge: 3 * s.cfg.ScrapeInterval, Now: now, Slack: s.cfg.Slack})
		if err != nil {
			return err
		}
		p := &pool{index: pi, maxInput: pc.MaxInputTokens, balancer: b}
		if a := s.cfg.Admission; a != nil {
			p.adm = route.NewQueue[int32](a.Limits)
			p.adm.OnAdmit = func(id int32) { s.admitting = append(s.admitting, id) }
		}
		for range pc.Replicas {
			i := len(s.replicas)
			ec := s.cfg.Engine
			ec.Seed += uint64(i)
			v, err := engine.NewVirtual(ec)
			if err != nil {
				return err
			}
			name := "replica-" + itoa(int64(i))
			if len(s.cfg.ReplicaNames) > 0 {
				name = s.cfg.ReplicaNames[i]
			}
			r := &replica{index: i, name: name, pool: p, v: v, wakeAt: -1}
			s.replicas = append(s.replicas, r)
			p.replicas = append(p.replicas, r)
			s.res.Replicas = append(s.res.Replicas, ReplicaResult{Name: r.name, Pool: pi})
		}
		p.hint = route.WaitingHint(p.replicas, 3*s.cfg.ScrapeInterval)
		s.pools = append(s.pools, p)
	}
	return s.buildPrefill()
}

// loop runs events until none is left.
func (s *sim) loop() {
	for {
		next, ok := s.nextInstant()
		if !ok {
			return
		}
		s.now = next
		if s.cfg.ScrapeInterval > 0 && s.now == s.nextScrape {
			s.scrape()
		}
		if s.cfg.SampleInterval > 0 && s.now == s.nextSample {
			s.sample()
		}
		for s.ev.len() > 0 && s.ev.peek() == s.now {
			e := s.ev.pop()
			s.handle(e)
		}
		s.startSteps()
		if s.cfg.Stop != nil && s.cfg.Stop() {
			s.res.Stopped = true
			return
		}
	}
}

// nextInstant is the earliest pending event, or a periodic reading due
// before it while anything is pending.
func (s *sim) nextInstant() (int64, bool) {
	if s.ev.len() == 0 {
		return 0, false
	}
	t := s.ev.peek()
	if s.cfg.ScrapeInterval > 0 {
		for s.nextScrape < s.now {
			s.nextScrape += int64(s.cfg.ScrapeInterval)
		}
		t = min(t, s.nextScrape)
	}
	if s.cfg.SampleInterval > 0 {
		for s.nextSample < s.now {
			s.nextSample += int64(s.cfg.SampleInterval)
		}
		t = min(t, s.nextSample)
	}
	return t, true
}

func (s *sim) handle(e event) {
	switch e.kind {
	case evArrival:
		s.arrive()
	case evSend:
		s.send(e.id)
	case evRouter:
		s.atRouter(e.id)
	case evStepEnd:
		s.stepEnd(s.replicas[e.id])
	case evResponse:
		s.respond(e.id)
	case evExpire:
		s.expire(e.id)
	case evWake:
		r := s.replicas[e.id]
		r.wakeAt = -1
		s.startStep(r)
	case evFrontEnd:
		s.submit(e.id)
	case evStart:
		if s.load.RampFirstToken {
			s.rampWait = e.id
		}
		s.workerNext(e.id)
	}
}

// startSteps starts the next step of every idle replica given work at this
// instant.
func (s *sim) startSteps() {
	for _, r := range s.dirty {
		r.dirty = false
		s.startStep(r)
	}
	s.dirty = s.dirty[:0]
}

// startStep starts r's next step at now if it is idle and has work, and
// reports whether it did.
func (s *sim) startStep(r *replica) bool {
	if _, busy := r.v.Busy(); busy {
		return false
	}
	end, ok := r.v.Start(time.Duration(s.now))
	if !ok {
		// Idle with only KV transfers in flight: it has work once the
		// first ends (a serving engine's loop wakes then).
		if at, ok := r.v.NextReady(); ok && int64(at) > s.now && int64(at) != r.wakeAt {
			r.wakeAt = int64(at)
			s.ev.push(r.wakeAt, evWake, int32(r.index))
		}
		return false
	}
	if s.cfg.Steps {
		rr := &s.res.Replicas[r.index]
		rr.Steps = append(rr.Steps, r.v.LastStep())
	}
	s.ev.push(int64(end), evStepEnd, int32(r.index))
	return true
}

func (s *sim) touch(r *replica) {
	if !r.dirty {
		r.dirty = true
		s.dirty = append(s.dirty, r)
	}
}

// scrape is the router's periodic reading of every replica's queue.
func (s *sim) scrape() {
	at := engine.SimEpoch.Add(time.Duration(s.now))
	for _, r := range s.replicas {
		st := r.v.Stats()
		r.waiting, r.kvUsage, r.scrapedAt = float64(st.Waiting), st.KVUsage, at
	}
	s.nextScrape += int64(s.cfg.ScrapeInterval)
}

func (s *sim) sample() {
	sm := Sample{At: time.Duration(s.now)}
	for _, r := range s.replicas {
		st := r.v.Stats()
		sm.Running += st.Running
		sm.Waiting += st.Waiting
		sm.KVUsage += st.KVUsage
	}
	sm.KVUsage /= float64(len(s.replicas))
	s.res.Samples = append(s.res.Samples, sm)
	s.nextSample += int64(s.cfg.SampleInterval)
}

// newCall takes a free call slot.
func (s *sim) newCall() int32 {
	if n := len(s.free); n > 0 {
		id := s.free[n-1]
		s.free = s.free[:n-1]
		return id
	}
	s.calls = append(s.calls, call{})
	return int32(len(s.calls) - 1)
}

func (s *sim) release(id int32) {
	s.calls[id] = call{}
	s.free = append(s.free, id)
}

// record fills the parts of a record the client knows at send time.
func (s *sim) newRecord(c *call, intended int64) {
	s.seq++
	var (
		rec    *latency.Record
		chunks []int64
		split  *latency.ServerSplit
	)
	if n := len(s.spare); n > 0 {
		rec = s.spare[n-1]
		s.spare = s.spare[:n-1]
		chunks, split = rec.ChunkNS[:0], rec.Server
	} else {
		rec = new(latency.Record)
	}
	s.idBuf = strconv.AppendInt(append(append(s.idBuf[:0], s.cfg.RunID...), '-'), s.seq, 10)
	c.rec, c.split = rec, split
	*rec = latency.Record{
		Schema:             latency.RecordSchema,
		ChunkNS:            chunks,
		ID:                 string(s.idBuf),
		Seq:                s.seq,
		Model:              s.cfg.Model,
		Stream:             true,
		Session:            c.session,
		Turn:               c.turn,
		IntendedNS:         intended,
		SharedPrefixTokens: c.shared,
		PrefixBlocks:       c.blocks,
		PrefixBlockTokens:  c.blockLen,
		Warmup:             c.ticket <= int64(s.load.WarmupRequests) || time.Duration(intended) < s.load.WarmupDuration,
	}
}

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	if n == 0 {
		return "0"
	}
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

// sat adds durations without overflow (a deadline far in the future).
func sat(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
