package route

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"time"
)

// Admission rejections; a Rejection wraps one of them.
var (
	ErrQueueFull       = errors.New("the pool's queue is full")
	ErrDeadline        = errors.New("predicted queue wait already breaks the request's TTFT deadline")
	ErrDeadlineExpired = errors.New("the request's TTFT deadline passed while it waited in the queue")
)

// Rejection is an admission refusal with the Retry-After it suggests.
type Rejection struct {
	Err        error
	RetryAfter time.Duration
}

func (e *Rejection) Error() string { return e.Err.Error() }

// Unwrap makes errors.Is(err, ErrQueueFull) and the like work.
func (e *Rejection) Unwrap() error { return e.Err }

// Limits configure an admission queue.
type Limits struct {
	// MaxSize bounds the waiting requests; one more is rejected with
	// ErrQueueFull.
	MaxSize int
	// Concurrency is the initial limit on requests admitted and not yet
	// released; 0 means unlimited (no queueing). When Adaptive it moves
	// between MinConcurrency and MaxConcurrency (see gradientLimiter).
	Concurrency, MinConcurrency, MaxConcurrency int
	Adaptive                                    bool
	// TargetTTFT, when positive, caps the upstream TTFT the adaptive
	// controller accepts: a window whose mean exceeds it cuts the limit.
	TargetTTFT time.Duration
}

// DefaultMaxSize is an admission queue's default bound (the gateway's).
const DefaultMaxSize = 1024

// WithDefaults fills the zero limits as the gateway's configuration does:
// a queue of DefaultMaxSize and, for an adaptive limit, bounds of 1 and
// 4 × Concurrency.
func (l Limits) WithDefaults() Limits {
	if l.MaxSize == 0 {
		l.MaxSize = DefaultMaxSize
	}
	if l.Adaptive {
		if l.MinConcurrency == 0 {
			l.MinConcurrency = 1
		}
		if l.MaxConcurrency == 0 {
			l.MaxConcurrency = 4 * l.Concurrency
		}
	}
	return l
}

// Validate reports a setting the queue cannot run with.
func (l Limits) Validate() error {
	switch {
	case l.MaxSize < 0:
		return fmt.Errorf("queue max size %d: must not be negative", l.MaxSize)
	case l.Concurrency < 0:
		return fmt.Errorf("queue concurrency %d: must not be negative", l.Concurrency)
	case l.Adaptive && l.Concurrency == 0:
		return fmt.Errorf("an adaptive limit needs a concurrency to start from")
	case l.Adaptive && (l.MinConcurrency < 1 || l.MinConcurrency > l.Concurrency || l.Concurrency > l.MaxConcurrency):
		return fmt.Errorf("an adaptive limit needs 1 <= min concurrency <= concurrency <= max concurrency (got %d, %d, %d)", l.MinConcurrency, l.Concurrency, l.MaxConcurrency)
	case l.TargetTTFT < 0:
		return fmt.Errorf("target TTFT %s: must not be negative", l.TargetTTFT)
	}
	return nil
}

// Queue is a pool's admission decisions: a bounded queue in front of a
// concurrency limit. Waiting requests are served by priority class (higher
// first), then earliest deadline first (no deadline last), then arrival
// order.
//
// With Adaptive on, the limit follows the upstream TTFT of admitted
// requests (see gradientLimiter), never the time they waited in the queue.
//
// A Queue is not safe for concurrent use and never blocks: the gateway
// holds a mutex around it and parks each waiter on a channel; the simulator
// calls it from its event loop. OnAdmit is told of every waiting request
// that a release (or a higher limit) admits.
type Queue[T any] struct {
	// OnAdmit receives the value of each queued request as it is admitted.
	OnAdmit func(T)

	cfg      Limits
	limit    float64 // 0 = unlimited
	ceiling  int     // when capped: a cap on inflight besides the limit (SetCeiling)
	capped   bool
	inflight int
	waiting  waitHeap[T]
	seq      uint64

	hold ewma             // how long an admitted request holds its slot
	ttft ewma             // TTFT after admission
	ctl  *gradientLimiter // nil: fixed limit
}

// Ticket is a request waiting in a Queue.
type Ticket[T any] struct {
	Value    T
	prio     int
	deadline time.Time // zero: none
	seq      uint64
	index    int
	admitted bool
}

// Admitted reports whether the ticket left the queue admitted.
func (t *Ticket[T]) Admitted() bool { return t.admitted }

// NewQueue returns an empty queue with limits l.
func NewQueue[T any](l Limits) *Queue[T] {
	return &Queue[T]{cfg: l, limit: float64(l.Concurrency), ctl: newLimiter(l)}
}

// newLimiter returns l's adaptive controller, nil for a fixed limit.
func newLimiter(l Limits) *gradientLimiter {
	if !l.Adaptive {
		return nil
	}
	return &gradientLimiter{}
}

// Update applies new limits (a configuration reload), keeping the queue and
// the counts; the limit restarts from Concurrency, and the adaptive
// controller from scratch, when Concurrency or Adaptive changed; otherwise
// an adaptive limit keeps its value (within the new bounds) and what it
// learnt.
func (q *Queue[T]) Update(l Limits) {
	switch {
	case l.Concurrency != q.cfg.Concurrency || l.Adaptive != q.cfg.Adaptive:
		q.limit = float64(l.Concurrency)
		q.ctl = newLimiter(l)
	case q.ctl != nil:
		q.limit = math.Max(float64(l.MinConcurrency), math.Min(float64(l.MaxConcurrency), q.limit))
	}
	q.cfg = l
	q.dispatch()
}

// ewma is an exponentially weighted moving average (weight 0.2 on the new
// sample); n counts samples.
type ewma struct {
	v float64
	n int
}

func (e *ewma) add(x float64) {
	if e.n == 0 {
		e.v = x
	} else {
		e.v += 0.2 * (x - e.v)
	}
	e.n++
}

type waitHeap[T any] []*Ticket[T]

func (h waitHeap[T]) Len() int           { return len(h) }
func (h waitHeap[T]) Less(i, j int) bool { return before(h[i], h[j]) }
func (h waitHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *waitHeap[T]) Push(x any) {
	w := x.(*Ticket[T])
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *waitHeap[T]) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	w.index = -1
	return w
}

// before orders tickets: priority, then deadline (none last), then arrival.
func before[T any](a, b *Ticket[T]) bool {
	if a.prio != b.prio {
		return a.prio > b.prio
	}
	if !a.deadline.Equal(b.deadline) {
		if a.deadline.IsZero() {
			return false
		}
		if b.deadline.IsZero() {
			return true
		}
		return a.deadline.Before(b.deadline)
	}
	return a.seq < b.seq
}

func (q *Queue[T]) full() bool {
	return q.limit > 0 && q.inflight >= int(math.Max(1, math.Floor(q.limit))) || q.capped && q.inflight >= q.ceiling
}

// SetCeiling caps the requests in flight at n besides the limit (n < 0:
// no cap), for slots a store shared by several gateways grants: the
// gateway sets it to the slots it holds. Raising it admits waiting
// requests; lowering it below the requests in flight admits none until
// enough are released.
func (q *Queue[T]) SetCeiling(n int) {
	q.ceiling, q.capped = n, n >= 0
	q.dispatch()
}

// slots is how many requests may be in flight at once: the limit, or the
// ceiling when lower; at least 1.
func (q *Queue[T]) slots() float64 {
	n := math.Max(1, math.Floor(q.limit))
	if q.capped {
		n = math.Max(1, math.Min(n, float64(q.ceiling)))
	}
	return n
}

// predictWait estimates how long a request ranked rank (0 = next) would
// wait: each of the slots (the limit, or the ceiling when lower) frees on
// average every hold seconds, so the rank-th in line waits (rank+1) ×
// hold / slots. ok is false before any request has released its slot.
func (q *Queue[T]) predictWait(rank int) (time.Duration, bool) {
	if q.hold.n == 0 || q.limit <= 0 {
		return 0, false
	}
	return time.Duration(float64(rank+1) * q.hold.v / q.slots()), true
}

// TryAdmit admits a request at once when a slot is free and nobody waits.
// The caller must Release it exactly once.
func (q *Queue[T]) TryAdmit() bool {
	if q.full() || len(q.waiting) > 0 {
		return false
	}
	q.inflight++
	return true
}

// Enqueue queues a request that TryAdmit refused, with its priority class
// and TTFT deadline (zero: none). It returns a *Rejection when the queue is
// full, or, with earlyReject and a deadline, when the predicted wait plus
// the usual TTFT after admission already passes the deadline at now.
func (q *Queue[T]) Enqueue(now time.Time, prio int, deadline time.Time, earlyReject bool, v T) (*Ticket[T], error) {
	if len(q.waiting) >= q.cfg.MaxSize {
		wait, _ := q.predictWait(len(q.waiting))
		return nil, &Rejection{Err: ErrQueueFull, RetryAfter: wait}
	}
	q.seq++
	t := &Ticket[T]{Value: v, prio: prio, deadline: deadline, seq: q.seq}
	if earlyReject && !deadline.IsZero() {
		rank := 0
		for _, o := range q.waiting {
			if before(o, t) {
				rank++
			}
		}
		if wait, ok := q.predictWait(rank); ok {
			if now.Add(wait + time.Duration(q.ttft.v)).After(deadline) {
				return nil, &Rejection{Err: ErrDeadline, RetryAfter: wait}
			}
		}
	}
	heap.Push(&q.waiting, t)
	return t, nil
}

// Abandon removes a waiting ticket (its client left, or its deadline
// expired); false when it was admitted meanwhile (the caller then holds a
// slot to release).
func (q *Queue[T]) Abandon(t *Ticket[T]) bool {
	if t.admitted {
		return false
	}
	heap.Remove(&q.waiting, t.index)
	return true
}

// Release frees a slot and admits waiting requests into the free slots.
// held is how long the request held its slot (0: it did not run, and the
// estimator learns nothing).
func (q *Queue[T]) Release(held time.Duration) {
	q.inflight--
	if held > 0 {
		q.hold.add(float64(held))
	}
	q.dispatch()
}

// ObserveFirstToken feeds an admitted request's upstream TTFT (from
// leaving the queue to its first token; never the time it waited in the
// queue) to the wait predictor and the adaptive controller. hint, when not
// nil, reports the requests the replicas say are waiting and whether that
// figure is fresh; a fresh positive figure stops the limit's growth.
func (q *Queue[T]) ObserveFirstToken(now time.Time, upstream time.Duration, hint func(time.Time) (float64, bool)) {
	q.ttft.add(float64(upstream))
	q.adapt(limitSample{now: now, upstream: upstream}, hint)
}

// ObserveDrop tells the adaptive controller that an admitted request ended
// without a first token on a sign of upstream overload (a 429 or 503
// answer, a timeout).
func (q *Queue[T]) ObserveDrop(now time.Time) {
	q.adapt(limitSample{now: now, drop: true}, nil)
}

func (q *Queue[T]) adapt(s limitSample, hint func(time.Time) (float64, bool)) {
	if q.ctl == nil {
		return
	}
	s.inflight = q.inflight
	if hint != nil {
		w, fresh := hint(s.now)
		s.upstreamQueued = fresh && w > 0
	}
	q.limit = q.ctl.next(q.cfg, q.limit, s)
	q.dispatch()
}

// WaitingHint is ObserveFirstToken's upstream hint over a pool's replicas: the
// requests they report waiting, fresh only when every one reported within
// maxAge (stale or missing figures give no hint). It is nil when maxAge is
// not positive: nothing is scraped.
func WaitingHint[R Replica](replicas []R, maxAge time.Duration) func(now time.Time) (waiting float64, fresh bool) {
	if maxAge <= 0 {
		return nil
	}
	return func(now time.Time) (float64, bool) {
		total := 0.0
		for _, r := range replicas {
			w, _, fresh := r.Load(now, maxAge)
			if !fresh {
				return 0, false
			}
			total += w
		}
		return total, true
	}
}

func (q *Queue[T]) dispatch() {
	for len(q.waiting) > 0 && !q.full() {
		t := heap.Pop(&q.waiting).(*Ticket[T])
		t.admitted = true
		q.inflight++
		if q.OnAdmit != nil {
			q.OnAdmit(t.Value)
		}
	}
}

// Depth is the number of waiting requests.
func (q *Queue[T]) Depth() int { return len(q.waiting) }

// InFlight is the number of admitted requests not yet released.
func (q *Queue[T]) InFlight() int { return q.inflight }

// Limit is the concurrency limit in force (0: unlimited).
func (q *Queue[T]) Limit() float64 { return q.limit }
