package gateway

import (
	"container/heap"
	"context"
	"errors"
	"math"
	"sync"
	"time"
)

// Admission errors; the proxy turns them into 429 with Retry-After.
var (
	errQueueFull       = errors.New("the pool's queue is full")
	errDeadline        = errors.New("predicted queue wait already breaks the request's TTFT deadline")
	errDeadlineExpired = errors.New("the request's TTFT deadline passed while it waited in the queue")
)

// admitError carries a rejection and the Retry-After it suggests.
type admitError struct {
	err        error
	retryAfter time.Duration
}

func (e *admitError) Error() string { return e.err.Error() }
func (e *admitError) Unwrap() error { return e.err }

// admission is a pool's bounded queue in front of a concurrency limit.
// Waiting requests are served by priority class (higher first), then
// earliest deadline first (no deadline last), then arrival order.
//
// With AIMD on, the limit grows by 1/limit for every request whose TTFT met
// the pool's target and is cut by a factor of 0.7 when one misses it, at
// most once per target interval; a fresh upstream hint of waiting requests
// stops the growth (see docs/gateway.md, "Shedding").
type admission struct {
	mu       sync.Mutex
	cfg      QueueConfig
	limit    float64 // 0 = unlimited
	inflight int
	waiting  waitHeap
	seq      uint64

	hold         ewma // how long an admitted request holds its slot
	ttft         ewma // TTFT after admission (connect + upstream TTFT)
	lastDecrease time.Time
	hint         func(now time.Time) (waiting float64, fresh bool)

	onChange func(depth, inflight int, limit float64)
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

func newAdmission(cfg QueueConfig) *admission {
	return &admission{cfg: cfg, limit: float64(cfg.Concurrency)}
}

// update applies a new configuration (hot reload), keeping counts.
func (a *admission) update(cfg QueueConfig) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if cfg.Concurrency != a.cfg.Concurrency || cfg.AIMD != a.cfg.AIMD {
		a.limit = float64(cfg.Concurrency)
	}
	a.cfg = cfg
	a.dispatchLocked(time.Time{})
}

type waiter struct {
	prio     int
	deadline time.Time // zero: none
	seq      uint64
	index    int
	ready    chan struct{}
	admitted bool
	err      error
}

type waitHeap []*waiter

func (h waitHeap) Len() int           { return len(h) }
func (h waitHeap) Less(i, j int) bool { return before(h[i], h[j]) }
func (h waitHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *waitHeap) Push(x any) {
	w := x.(*waiter)
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *waitHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	w.index = -1
	return w
}

// before orders waiters: priority, then deadline (none last), then arrival.
func before(a, b *waiter) bool {
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

func (a *admission) full() bool {
	return a.limit > 0 && a.inflight >= int(math.Max(1, math.Floor(a.limit)))
}

// predictWait estimates how long a request ranked rank (0 = next) would
// wait: each of the limit slots frees on average every hold seconds, so
// the rank-th in line waits (rank+1) × hold / limit. ok is false before any
// request has finished.
func (a *admission) predictWait(rank int) (time.Duration, bool) {
	if a.hold.n == 0 || a.limit <= 0 {
		return 0, false
	}
	return time.Duration(float64(rank+1) * a.hold.v / math.Max(1, math.Floor(a.limit))), true
}

// acquire admits the request or queues it until a slot frees, ctx ends or
// its deadline passes (when earlyReject). It returns the instant of
// admission; the caller must call release exactly once after a nil error.
func (a *admission) acquire(ctx context.Context, now func() time.Time, prio int, deadline time.Time, earlyReject bool) (time.Time, error) {
	a.mu.Lock()
	if !a.full() && len(a.waiting) == 0 {
		a.inflight++
		a.changedLocked()
		a.mu.Unlock()
		return now(), nil
	}
	if len(a.waiting) >= a.cfg.MaxSize {
		wait, _ := a.predictWait(len(a.waiting))
		a.mu.Unlock()
		return time.Time{}, &admitError{err: errQueueFull, retryAfter: wait}
	}
	a.seq++
	w := &waiter{prio: prio, deadline: deadline, seq: a.seq, ready: make(chan struct{})}
	if earlyReject && !deadline.IsZero() {
		rank := 0
		for _, o := range a.waiting {
			if before(o, w) {
				rank++
			}
		}
		if wait, ok := a.predictWait(rank); ok {
			predicted := now().Add(wait + time.Duration(a.ttft.v))
			if predicted.After(deadline) {
				a.mu.Unlock()
				return time.Time{}, &admitError{err: errDeadline, retryAfter: wait}
			}
		}
	}
	heap.Push(&a.waiting, w)
	a.changedLocked()
	a.mu.Unlock()

	var expire <-chan time.Time
	if earlyReject && !deadline.IsZero() {
		t := time.NewTimer(deadline.Sub(now()))
		defer t.Stop()
		expire = t.C
	}
	select {
	case <-w.ready:
		return now(), w.err
	case <-ctx.Done():
		if a.abandon(w) {
			return time.Time{}, ctx.Err()
		}
		<-w.ready
		a.release(now(), 0, false)
		return time.Time{}, ctx.Err()
	case <-expire:
		if a.abandon(w) {
			return time.Time{}, &admitError{err: errDeadlineExpired}
		}
		<-w.ready
		return now(), w.err
	}
}

// abandon removes w from the queue; false when it was admitted meanwhile.
func (a *admission) abandon(w *waiter) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if w.admitted {
		return false
	}
	heap.Remove(&a.waiting, w.index)
	a.changedLocked()
	return true
}

// release frees a slot. held is how long the request held it; ttft its
// TTFT after admission, ok whether it produced a first token (only then do
// the estimators and AIMD learn from it).
func (a *admission) release(now time.Time, held time.Duration, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.inflight--
	if held > 0 {
		a.hold.add(float64(held))
	}
	a.dispatchLocked(now)
}

// observeTTFT feeds a request's measured TTFT (from gateway arrival) and
// its post-admission part to the predictor and the AIMD controller.
func (a *admission) observeTTFT(now time.Time, ttft, afterAdmit time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ttft.add(float64(afterAdmit))
	if !a.cfg.AIMD {
		return
	}
	target := a.cfg.TargetTTFT.D()
	if ttft <= target {
		if a.hint != nil {
			if w, fresh := a.hint(now); fresh && w > 0 {
				return // the upstreams already queue: do not grow
			}
		}
		a.limit = math.Min(float64(a.cfg.MaxConcurrency), a.limit+1/a.limit)
	} else if a.lastDecrease.IsZero() || now.Sub(a.lastDecrease) >= target {
		a.limit = math.Max(float64(a.cfg.MinConcurrency), a.limit*0.7)
		a.lastDecrease = now
	}
	a.dispatchLocked(now)
}

func (a *admission) dispatchLocked(time.Time) {
	for len(a.waiting) > 0 && !a.full() {
		w := heap.Pop(&a.waiting).(*waiter)
		w.admitted = true
		a.inflight++
		close(w.ready)
	}
	a.changedLocked()
}

func (a *admission) changedLocked() {
	if a.onChange != nil {
		a.onChange(len(a.waiting), a.inflight, a.limit)
	}
}

// snapshot returns the queue's state, for tests and the debug endpoint.
func (a *admission) snapshot() (depth, inflight int, limit float64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.waiting), a.inflight, a.limit
}
