package engine

import (
	"math/rand/v2"
	"time"

	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

type reqState uint8

const (
	stNew reqState = iota
	stWaiting
	stRunning
	stTransfer // a remote prefill pulling its prompt's KV cache
	stDone
)

// request is the scheduler's state for one request. Instants are
// nanoseconds since the engine's epoch; -1 means "not yet".
type request struct {
	id        string
	idx       int // arrival index (simulation)
	promptLen int
	target    int          // output tokens to produce
	reserve   int          // tokens GuaranteedNoEvict reserves: prompt, max_tokens and a draft
	reasoning int          // how many of the first output tokens are reasoning (at most target)
	finishAs  FinishReason // reason when target is reached
	priority  int
	seq       uint64 // arrival order

	prompt []int32  // kept until hashed (at the first admission try); nil after, or when caching is off
	hashes []uint64 // chained hashes of the prompt's full blocks

	blocks   []int32
	computed int // tokens whose KV is in the cache
	output   int // tokens emitted

	state                                reqState
	arrival, scheduled, firstTok, finish int64
	cachedTokens, chunks, preemptions    int
	reason                               FinishReason

	// firstAnswer is the end of the step that emitted the first token
	// after the reasoning ones (-1: none yet, or no reasoning).
	firstAnswer int64

	// remote: the prompt's KV comes from a prefill instance (pulled
	// once: a preempted request recomputes). xferStart and xferEnd bound
	// the pull (-1: none yet); xferTokens is what it pulled; remoteTP
	// the prefill instance's TP (Request.RemoteTP).
	remote              bool
	remoteTP            int
	xferStart, xferEnd  int64
	xferTokens, xferHit int

	stream    *Stream     // serving only
	stopAbort func() bool // serving only: unregisters the context hook
}

// numTokens is the prompt plus the tokens emitted so far: what a
// recomputation after preemption must rebuild.
func (r *request) numTokens() int { return r.promptLen + r.output }

type planned struct {
	r      *request
	n      int // tokens computed this step
	ctx    int // tokens in the cache before the step
	decode bool
}

// scheduler is the engine core shared by both clocks. It is not safe for
// concurrent use: one goroutine (Run, or Simulate) owns it.
type scheduler struct {
	cfg      Config
	kv       *kvCache
	timer    StepTimer
	rng      *rand.Rand // speculative acceptance
	outRng   *rand.Rand // output lengths (under Engine.mu when serving)
	thinkRng *rand.Rand // reasoning lengths, a stream of their own so that output lengths do not move
	chunked  bool
	k        int
	alpha    float64

	running   []*request
	waiting   waitQueue
	transfers []*request // remote prefills pulling KV, in admission order (aborted ones dropped lazily)
	nextSeq   uint64

	plan     []planned
	batch    perfmodel.Batch
	emits    []Output
	nPreempt int // preemptions in the current plan

	steps, preemptions, prefixQueries, prefixHits, promptTokens, genTokens int64

	// recvAt is when the scheduler last took arrivals into its waiting
	// queue (Config.RecvInterval); a waiting request that arrived later is
	// not admitted. decodes counts the decode steps since; lastDecode says
	// the last step planned was decodes only (false: prompt work, or none).
	recvAt     int64
	decodes    int
	lastDecode bool
	// held is how many steps in a row batch waiting has held the waiting
	// prompts back (Config.BatchWaitIters).
	held int
}

func newScheduler(cfg Config) *scheduler {
	return &scheduler{
		cfg:      cfg,
		kv:       newKVCache(cfg.NumBlocks, cfg.BlockSize, cfg.EnablePrefixCaching),
		timer:    cfg.StepTimer,
		rng:      rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5851f42d4c957f2d)),
		outRng:   rand.New(rand.NewPCG(cfg.Seed^0xa0761d6478bd642f, cfg.Seed)),
		thinkRng: rand.New(rand.NewPCG(cfg.Seed^0xe7037ed1a0b428db, cfg.Seed)),
		chunked:  !cfg.DisableChunkedPrefill,
		k:        cfg.Speculative.K,
		alpha:    cfg.Speculative.Alpha,
		waiting:  waitQueue{prio: cfg.Policy == PolicyPriority},
	}
}

// newRequest builds the scheduler state for a validated request arriving at
// now, drawing its output length.
func (s *scheduler) newRequest(q *Request, now int64) *request {
	r := new(request)
	s.initRequest(r, q, now)
	return r
}

// initRequest fills r (the state for q arriving at now) and draws its output
// length.
func (s *scheduler) initRequest(r *request, q *Request, now int64) {
	blocks := r.blocks[:0] // a recycled request's block table keeps its capacity
	*r = request{
		blocks:    blocks,
		id:        q.ID,
		promptLen: q.promptLen(),
		priority:  q.Priority,
		prompt:    q.Prompt,
		arrival:   now,
		scheduled: -1,
		firstTok:  -1,
		finish:    -1,
		state:     stNew,
	}
	r.firstAnswer = -1
	r.remote, r.remoteTP, r.xferStart, r.xferEnd = q.RemotePrefill, q.RemoteTP, -1, -1
	r.reserve = r.promptLen + q.MaxTokens + s.k
	r.target, r.finishAs = s.drawOutput(q)
	if s.cfg.Reasoning != nil {
		r.reasoning = min(s.cfg.Reasoning.Sample(s.thinkRng), r.target)
	}
	if !s.cfg.EnablePrefixCaching {
		r.prompt = nil
	}
}

// add puts r at the back of the waiting queue.
func (s *scheduler) add(r *request) {
	r.seq = s.nextSeq
	s.nextSeq++
	r.state = stWaiting
	s.waiting.push(r)
}

// drawOutput decides how many tokens q produces and why it stops.
func (s *scheduler) drawOutput(q *Request) (int, FinishReason) {
	maxT := q.MaxTokens
	if q.IgnoreEOS || q.MinTokens >= maxT {
		return maxT, FinishLength
	}
	n := min(s.cfg.OutputLength.Sample(s.outRng), maxT)
	n = max(n, q.MinTokens)
	if n >= maxT {
		return maxT, FinishLength
	}
	return n, FinishStop
}

// schedule plans one step starting at now and prices it. ok is false when
// there is nothing to compute.
func (s *scheduler) schedule(now int64) (dur time.Duration, ok bool) {
	s.landTransfers(now)
	s.receive(now)
	s.planStep(now)
	if len(s.plan) == 0 && s.nPreempt == 0 && s.recvAt < now {
		// Nothing to run: SGLang's idle loop polls again at once, so what
		// has arrived is taken now.
		s.recvAt, s.decodes = now, 0
		s.planStep(now)
	}
	if len(s.plan) == 0 {
		s.lastDecode = false
		return 0, false
	}
	s.lastDecode = true
	for _, p := range s.plan {
		if !p.decode {
			s.lastDecode = false
			break
		}
	}
	return s.price(), true
}

// planStep plans the step at now into s.plan.
func (s *scheduler) planStep(now int64) {
	s.plan = s.plan[:0]
	s.nPreempt = 0
	// Apart (SGLang): prompt work first, into a step of its own; decodes
	// only in a step with no prompt work.
	budget := s.planRunning(s.cfg.MaxNumBatchedTokens, s.cfg.SeparatePrefill)
	// Then waiting requests, into the leftover budget, unless this step
	// preempted (vLLM V1 does the same).
	if s.nPreempt == 0 && !s.holdPrompts(budget) {
		s.admitWaiting(now, budget)
	}
	if len(s.plan) == 0 && s.cfg.SeparatePrefill {
		s.planRunning(s.cfg.MaxNumBatchedTokens, false)
	}
}

// holdPrompts applies TensorRT-LLM's batch waiting (Config.BatchWaitIters,
// BatchWaitTokens): with requests decoding in the plan and prompts
// waiting, it holds the prompts back while the step's tokens (the planned
// ones and the waiting prompts', up to budget) are below BatchWaitTokens
// and fewer than BatchWaitIters steps in a row have held them.
func (s *scheduler) holdPrompts(budget int) bool {
	if s.cfg.BatchWaitIters <= 0 || s.cfg.BatchWaitTokens <= 0 || len(s.plan) == 0 || s.waiting.len() == 0 {
		return false
	}
	tokens, prompts := 0, 0
	for _, p := range s.plan {
		tokens += p.n
	}
	s.waiting.each(func(r *request) { prompts += r.numTokens() })
	if s.held >= s.cfg.BatchWaitIters || tokens+min(prompts, budget) >= s.cfg.BatchWaitTokens {
		s.held = 0
		return false
	}
	s.held++
	return true
}

// receive decides whether the scheduler takes arrivals at now
// (Config.RecvInterval): after a step with prompt work or none, or after
// RecvInterval decode steps since it last took them; every step when the
// interval is at most 1.
func (s *scheduler) receive(now int64) {
	if s.cfg.RecvInterval > 1 && s.lastDecode {
		if s.decodes++; s.decodes < s.cfg.RecvInterval {
			return
		}
	}
	s.recvAt, s.decodes = now, 0
}

// planRunning plans the running requests first, decodes (unless
// promptsOnly) and the next chunks of prompts, preempting where the KV
// cache cannot grow, and returns the budget left.
func (s *scheduler) planRunning(budget int, promptsOnly bool) int {
	bs := s.cfg.BlockSize
	for i := 0; i < len(s.running) && budget > 0; i++ {
		r := s.running[i]
		remaining := r.numTokens() - r.computed
		decode := r.output > 0 && remaining == 1
		if decode && promptsOnly {
			continue
		}
		n := remaining
		if decode {
			n = 1 + s.k
		}
		if n > budget {
			if !decode && !s.chunked && n <= s.cfg.MaxNumBatchedTokens {
				continue
			}
			n = budget
		}
		for r.computed+n > len(r.blocks)*bs && !s.kv.grow(&r.blocks, r.computed+n) {
			v := s.victim()
			s.preempt(v)
			if v == i {
				r = nil
				i--
				break
			}
			if v < i { // the victim was already planned: unplan it
				i--
				budget = s.restoreBudget(budget)
			}
		}
		if r == nil {
			continue
		}
		s.plan = append(s.plan, planned{r: r, n: n, ctx: r.computed, decode: decode})
		budget -= n
	}
	return budget
}

// admitWaiting admits waiting requests in order while the budget, the
// sequence limit, the free KV blocks (after prefix-cache hits) and the
// admissions per step (Config.AdmitPerStep) allow.
func (s *scheduler) admitWaiting(now int64, budget int) {
	bs := s.cfg.BlockSize
	for admitted := 0; budget > 0 && len(s.running) < s.cfg.MaxNumSeqs; admitted++ {
		if s.cfg.AdmitPerStep > 0 && admitted >= s.cfg.AdmitPerStep {
			break
		}
		r := s.waiting.peek()
		if r == nil || r.arrival > s.recvAt && s.cfg.RecvInterval > 1 {
			break
		}
		numTok := r.numTokens()
		hits, evict := 0, 0
		if s.cfg.EnablePrefixCaching {
			if r.prompt != nil {
				r.hashes = blockHashes(r.prompt, bs)
				r.prompt = nil
			}
			hits, evict = s.kv.lookup(r.hashes, (numTok-1)/bs)
		}
		hitTok := hits * bs
		if r.remote && r.xferStart < 0 {
			if !s.startTransfer(r, now, hits, evict) {
				break
			}
			continue
		}
		n := numTok - hitTok
		if n > budget {
			// Whole prompts only, unless this one can never fit a step (a
			// preempted request's recompute under PromptFitsStep): then in chunks.
			if !s.chunked && n <= s.cfg.MaxNumBatchedTokens {
				break
			}
			n = budget
		}
		hold := hitTok + n
		if s.cfg.GuaranteedNoEvict {
			hold = max(hold, r.reserve)
		}
		if s.kv.blocksFor(hold)-hits+evict > s.kv.numFree {
			break
		}
		s.waiting.pop()
		if need := s.kv.blocksFor(max(r.promptLen+r.target+s.k, hold)); cap(r.blocks) < need {
			r.blocks = make([]int32, 0, need)
		}
		s.kv.take(&r.blocks, r.hashes, hits)
		s.kv.grow(&r.blocks, hold)
		r.computed = hitTok
		if s.cfg.EnablePrefixCaching {
			s.prefixQueries += int64(numTok)
			s.prefixHits += int64(hitTok)
		}
		if r.scheduled < 0 { // first admission
			r.cachedTokens = hitTok
			r.scheduled = now
		}
		r.state = stRunning
		s.running = append(s.running, r)
		s.plan = append(s.plan, planned{r: r, n: n, ctx: hitTok})
		budget -= n
	}
}

// startTransfer admits the remote prefill r at now if the free KV blocks
// (after hits prefix-cache hits, evict of them evictable) hold its prompt:
// it takes its blocks and starts pulling the prompt's full blocks that
// the cache lacks (vLLM's connectors leave the partial last block to the
// decode side).
func (s *scheduler) startTransfer(r *request, now int64, hits, evict int) bool {
	bs := s.cfg.BlockSize
	if s.kv.blocksFor(r.promptLen)-hits+evict > s.kv.numFree {
		return false
	}
	s.waiting.pop()
	if need := s.kv.blocksFor(r.promptLen + r.target + s.k); cap(r.blocks) < need {
		r.blocks = make([]int32, 0, need)
	}
	s.kv.take(&r.blocks, r.hashes, hits)
	s.kv.grow(&r.blocks, r.promptLen)
	if s.cfg.EnablePrefixCaching {
		s.prefixQueries += int64(r.promptLen)
		s.prefixHits += int64(hits * bs)
	}
	r.cachedTokens = hits * bs
	r.xferHit = hits
	r.xferTokens = max(r.promptLen/bs*bs-hits*bs, 0)
	r.xferStart = now
	r.xferEnd = now + int64(s.cfg.KVLink.TransferSharded(int64(r.xferTokens)*s.cfg.KVBytesPerToken, kvShards(s.cfg.TP, r.remoteTP)))
	r.state = stTransfer
	s.transfers = append(s.transfers, r)
	return true
}

// landTransfers moves the remote prefills whose pull ended by now into
// the running list, their pulled blocks computed (and published to the
// prefix cache): the step starting at now computes the rest of the
// prompt, at least its last token, whose logits give the first token.
func (s *scheduler) landTransfers(now int64) {
	bs := s.cfg.BlockSize
	j := 0
	for _, r := range s.transfers {
		switch {
		case r.state != stTransfer: // aborted
			continue
		case r.xferEnd > now:
			s.transfers[j] = r
			j++
			continue
		}
		full := r.xferHit*bs + r.xferTokens
		if len(r.hashes) > r.xferHit {
			s.kv.publish(r.blocks, r.hashes, r.xferHit, full/bs)
		}
		r.computed = min(full, r.promptLen-1)
		r.scheduled = now
		r.state = stRunning
		s.running = append(s.running, r)
	}
	clear(s.transfers[j:])
	s.transfers = s.transfers[:j]
}

// nextReady is the instant the earliest KV transfer in flight ends.
func (s *scheduler) nextReady() (int64, bool) {
	at, ok := int64(0), false
	for _, r := range s.transfers {
		if r.state == stTransfer && (!ok || r.xferEnd < at) {
			at, ok = r.xferEnd, true
		}
	}
	return at, ok
}

// numTransfers counts the KV transfers in flight.
func (s *scheduler) numTransfers() int {
	n := 0
	for _, r := range s.transfers {
		if r.state == stTransfer {
			n++
		}
	}
	return n
}

// price times the planned step with the step timer.
func (s *scheduler) price() time.Duration {
	s.batch.Reset()
	anyDecode := false
	for _, p := range s.plan {
		if p.decode {
			s.batch.AddDecode(p.n, p.ctx)
			anyDecode = true
		} else {
			s.batch.Add(p.n, p.ctx)
		}
	}
	if anyDecode && s.k > 0 {
		s.batch.DraftK = s.k
	}
	return max(s.timer.StepTime(&s.batch), 0)
}

// restoreBudget drops plan entries of requests preempted after they were
// planned and gives their tokens back.
func (s *scheduler) restoreBudget(budget int) int {
	j := 0
	for _, p := range s.plan {
		if p.r.state != stRunning {
			budget += p.n
			continue
		}
		s.plan[j] = p
		j++
	}
	s.plan = s.plan[:j]
	return budget
}

// victim picks the running request to preempt: the newest under FCFS, the
// largest (priority, arrival) under the priority policy.
func (s *scheduler) victim() int {
	v := len(s.running) - 1
	if s.waiting.prio {
		for i, r := range s.running {
			w := s.running[v]
			if r.priority > w.priority || r.priority == w.priority && r.seq > w.seq {
				v = i
			}
		}
	}
	return v
}

// preempt frees running[i]'s blocks and returns it to the front of the
// waiting queue, to be recomputed.
func (s *scheduler) preempt(i int) {
	r := s.running[i]
	copy(s.running[i:], s.running[i+1:])
	s.running[len(s.running)-1] = nil
	s.running = s.running[:len(s.running)-1]
	s.kv.free(r.blocks)
	r.blocks = r.blocks[:0]
	r.computed = 0
	r.preemptions++
	r.state = stWaiting
	s.waiting.pushFront(r)
	s.preemptions++
	s.nPreempt++
}

// complete applies the planned step, which ended at end: advances every
// planned request, emits tokens and finishes requests.
func (s *scheduler) complete(end int64) {
	s.steps++
	s.emits = s.emits[:0]
	bs := s.cfg.BlockSize
	finished := false
	for _, p := range s.plan {
		r := p.r
		emit := 0
		if p.decode {
			acc := 0
			for acc < p.n-1 && s.rng.Float64() < s.alpha {
				acc++
			}
			r.computed += 1 + acc
			emit = 1 + acc
		} else {
			old := r.computed / bs
			r.computed += p.n
			r.chunks++
			s.promptTokens += int64(p.n)
			if len(r.hashes) > old { // hashes is nil when caching is off
				s.kv.publish(r.blocks, r.hashes, old, r.computed/bs)
			}
			if r.computed == r.numTokens() {
				emit = 1
			}
		}
		if emit == 0 {
			continue
		}
		if rem := r.target - r.output; emit > rem {
			emit = rem
		}
		if r.output == 0 {
			r.firstTok = end
		}
		if r.reasoning > 0 && r.output <= r.reasoning && r.output+emit > r.reasoning {
			r.firstAnswer = end
		}
		r.output += emit
		s.genTokens += int64(emit)
		var fin FinishReason
		if r.output >= r.target {
			fin = r.finishAs
			s.finishReq(r, end, fin)
			finished = true
		}
		s.emits = append(s.emits, Output{r: r, Tokens: emit, Finish: fin})
	}
	s.plan = s.plan[:0]
	if finished {
		s.compactRunning()
	}
}

// finishReq ends r: frees its blocks and stamps the finish.
func (s *scheduler) finishReq(r *request, at int64, why FinishReason) {
	if r.state == stWaiting {
		s.waiting.dead++
	}
	s.kv.free(r.blocks)
	r.blocks = r.blocks[:0] // kept for a recycled request (Virtual)
	r.state = stDone
	r.finish = at
	r.reason = why
}

// abort ends r with FinishAbort at now, wherever it is. The caller compacts
// the running list afterwards. It reports whether r was still live.
func (s *scheduler) abort(r *request, now int64) bool {
	if r.state == stDone {
		return false
	}
	s.finishReq(r, now, FinishAbort)
	return true
}

func (s *scheduler) compactRunning() {
	j := 0
	for _, r := range s.running {
		if r.state == stRunning {
			s.running[j] = r
			j++
		}
	}
	clear(s.running[j:])
	s.running = s.running[:j]
}

func (s *scheduler) numWaiting() int { return s.waiting.len() }

// waitQueue is the waiting queue: a deque under FCFS (preempted requests go
// to the front), a heap on (priority, arrival) under the priority policy.
// Aborted requests are dropped lazily; dead counts them.
type waitQueue struct {
	prio bool
	ring []*request
	head int
	n    int
	heap []*request
	dead int
}

func (q *waitQueue) len() int {
	if q.prio {
		return len(q.heap) - q.dead
	}
	return q.n - q.dead
}

func (q *waitQueue) grow() {
	if q.n < len(q.ring) {
		return
	}
	nr := make([]*request, max(16, 2*len(q.ring)))
	for i := range q.n {
		nr[i] = q.ring[(q.head+i)%len(q.ring)]
	}
	q.ring, q.head = nr, 0
}

func (q *waitQueue) push(r *request) {
	if q.prio {
		q.heapPush(r)
		return
	}
	q.grow()
	q.ring[(q.head+q.n)%len(q.ring)] = r
	q.n++
}

func (q *waitQueue) pushFront(r *request) {
	if q.prio {
		q.heapPush(r)
		return
	}
	q.grow()
	q.head = (q.head - 1 + len(q.ring)) % len(q.ring)
	q.ring[q.head] = r
	q.n++
}

// peek returns the next live request, or nil.
func (q *waitQueue) peek() *request {
	for {
		var r *request
		if q.prio {
			if len(q.heap) == 0 {
				return nil
			}
			r = q.heap[0]
		} else {
			if q.n == 0 {
				return nil
			}
			r = q.ring[q.head]
		}
		if r.state == stWaiting {
			return r
		}
		q.dead--
		q.popRaw()
	}
}

func (q *waitQueue) pop() *request {
	r := q.peek()
	if r != nil {
		q.popRaw()
	}
	return r
}

func (q *waitQueue) popRaw() {
	if q.prio {
		q.heapPop()
		return
	}
	q.ring[q.head] = nil
	q.head = (q.head + 1) % len(q.ring)
	q.n--
}

func less(a, b *request) bool {
	return a.priority < b.priority || a.priority == b.priority && a.seq < b.seq
}

func (q *waitQueue) heapPush(r *request) {
	q.heap = append(q.heap, r)
	i := len(q.heap) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !less(q.heap[i], q.heap[p]) {
			break
		}
		q.heap[i], q.heap[p] = q.heap[p], q.heap[i]
		i = p
	}
}

func (q *waitQueue) heapPop() {
	h := q.heap
	last := len(h) - 1
	h[0] = h[last]
	h[last] = nil
	h = h[:last]
	i := 0
	for {
		l, m := 2*i+1, i
		if l < len(h) && less(h[l], h[m]) {
			m = l
		}
		if l+1 < len(h) && less(h[l+1], h[m]) {
			m = l + 1
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	q.heap = h
}

// each calls f for every live waiting request (any order).
func (q *waitQueue) each(f func(*request)) {
	if q.prio {
		for _, r := range q.heap {
			if r.state == stWaiting {
				f(r)
			}
		}
		return
	}
	for i := range q.n {
		if r := q.ring[(q.head+i)%len(q.ring)]; r.state == stWaiting {
			f(r)
		}
	}
}

// kvShards is how many shards a KV transfer between a prefill instance of
// remoteTP ranks (0: tp) and a decode instance of tp ranks (0: 1) moves at
// once: each rank holds its share of the KV heads and moves it over its own
// link, so the side with fewer ranks bounds the transfer (docs/perfmodel.md,
// "KV transfer").
func kvShards(tp, remoteTP int) int {
	tp = max(tp, 1)
	if remoteTP <= 0 {
		return tp
	}
	return min(tp, remoteTP)
}
