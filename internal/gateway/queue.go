package gateway

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/tokentrace/tokentrace/internal/route"
)

// Admission errors; the proxy turns them into 429 with Retry-After.
var (
	errQueueFull       = route.ErrQueueFull
	errDeadlineExpired = route.ErrDeadlineExpired
)

// admitError carries a rejection and the Retry-After it suggests.
type admitError struct {
	err        error
	retryAfter time.Duration
}

func (e *admitError) Error() string { return e.err.Error() }
func (e *admitError) Unwrap() error { return e.err }

// admission is a pool's bounded queue in front of a concurrency limit: the
// decisions are internal/route's Queue (shared with the simulator; see its
// doc for the order, early rejection and the adaptive limit), made under a
// mutex, with
// each waiting request parked on a channel until it is admitted, its
// context ends or its deadline passes.
type admission struct {
	mu   sync.Mutex
	q    *route.Queue[*waiter]
	hint func(now time.Time) (waiting float64, fresh bool)

	onChange func(depth, inflight int, limit float64)

	// shared, when set, caps the requests in flight at the slots this
	// replica holds of the pool's limit shared through Redis
	// (queue.shared); onFallback counts a request admitted (allowed) or
	// refused while Redis is unreachable.
	shared     *sharedSlots
	onFallback func(allowed bool)
	// firstTokens and drops count what the adaptive limit was fed (for
	// tests and the debug endpoint).
	firstTokens, drops int
}

// waiter is a request parked in the queue; ready is closed when admitted.
// unchecked is set when it was admitted while Redis was unreachable
// under fail_open.
type waiter struct {
	ready     chan struct{}
	unchecked bool
}

func limitsOf(cfg QueueConfig) route.Limits {
	return route.Limits{MaxSize: cfg.MaxSize, Concurrency: cfg.Concurrency, MinConcurrency: cfg.MinConcurrency,
		MaxConcurrency: cfg.MaxConcurrency, Adaptive: cfg.adaptive() != "", TargetTTFT: cfg.TargetTTFT.D()}
}

func newAdmission(cfg QueueConfig) *admission {
	q := route.NewQueue[*waiter](limitsOf(cfg))
	a := &admission{q: q}
	q.OnAdmit = func(w *waiter) {
		w.unchecked = a.shared != nil && a.shared.open
		close(w.ready)
	}
	a.setSharedLocked(sharedLimit(cfg))
	return a
}

// sharedLimit is the limit the pool shares across replicas, 0 for none.
func sharedLimit(cfg QueueConfig) int {
	if !cfg.Shared {
		return 0
	}
	return cfg.Concurrency
}

// update applies a new configuration (hot reload), keeping counts.
func (a *admission) update(cfg QueueConfig) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.q.Update(limitsOf(cfg))
	a.setSharedLocked(sharedLimit(cfg))
	a.changedLocked()
}

// acquire admits the request or queues it until a slot frees, ctx ends or
// its deadline passes (when earlyReject). It returns the instant of
// admission; the caller must call release exactly once after a nil error.
func (a *admission) acquire(ctx context.Context, now func() time.Time, prio int, deadline time.Time, earlyReject bool) (time.Time, error) {
	a.mu.Lock()
	if s := a.shared; s != nil && s.closed {
		retry := s.retry
		a.mu.Unlock()
		a.fellBack(false)
		return time.Time{}, &admitError{err: errSharedUnavailable, retryAfter: retry}
	}
	if a.q.TryAdmit() {
		unchecked := a.shared != nil && a.shared.open
		a.changedLocked()
		a.mu.Unlock()
		if unchecked {
			a.fellBack(true)
		}
		return now(), nil
	}
	w := &waiter{ready: make(chan struct{})}
	t, err := a.q.Enqueue(now(), prio, deadline, earlyReject, w)
	if err != nil {
		a.mu.Unlock()
		var r *route.Rejection
		if errors.As(err, &r) {
			return time.Time{}, &admitError{err: r.Err, retryAfter: r.RetryAfter}
		}
		return time.Time{}, err
	}
	a.changedLocked()
	a.kickLocked()
	var refused <-chan struct{} // a shared pool whose Redis failed under fail_closed
	if a.shared != nil {
		refused = a.shared.refuse
	}
	a.mu.Unlock()

	var expire <-chan time.Time
	if earlyReject && !deadline.IsZero() {
		tm := time.NewTimer(deadline.Sub(now()))
		defer tm.Stop()
		expire = tm.C
	}
	select {
	case <-w.ready:
		if w.unchecked {
			a.fellBack(true)
		}
		return now(), nil
	case <-ctx.Done():
		if a.abandon(t) {
			return time.Time{}, ctx.Err()
		}
		<-w.ready
		a.release(now(), 0, false)
		return time.Time{}, ctx.Err()
	case <-expire:
		if a.abandon(t) {
			return time.Time{}, &admitError{err: errDeadlineExpired}
		}
		<-w.ready
		return now(), nil
	case <-refused:
		if a.abandon(t) {
			a.fellBack(false)
			return time.Time{}, &admitError{err: errSharedUnavailable, retryAfter: a.retryAfterShared()}
		}
		<-w.ready
		return now(), nil
	}
}

// abandon removes t from the queue; false when it was admitted meanwhile.
func (a *admission) abandon(t *route.Ticket[*waiter]) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.q.Abandon(t) {
		return false
	}
	a.changedLocked()
	a.kickLocked()
	return true
}

// retryAfterShared is the Retry-After of a request refused because the
// shared pool's Redis is unreachable: its retry interval.
func (a *admission) retryAfterShared() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.shared == nil {
		return 0
	}
	return a.shared.retry
}

// fellBack counts a request decided while Redis was unreachable.
func (a *admission) fellBack(allowed bool) {
	if a.onFallback != nil {
		a.onFallback(allowed)
	}
}

// release frees a slot. held is how long the request held it; ok whether
// it produced a first token.
func (a *admission) release(_ time.Time, held time.Duration, _ bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.shared; s != nil && !s.open {
		// The slot goes back to the pool (on the next report), not to
		// the next request here: replicas waiting take freed slots in turn.
		s.held--
		a.q.SetCeiling(s.held)
	}
	a.q.Release(held)
	a.changedLocked()
	a.kickLocked()
}

// observeFirstToken feeds an admitted request's upstream TTFT (from
// leaving the queue to its first token; never the time it waited in the
// queue) to the predictor and the adaptive limit.
func (a *admission) observeFirstToken(now time.Time, upstream time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.q.ObserveFirstToken(now, upstream, a.hint)
	a.firstTokens++
	a.changedLocked()
}

// observeDrop tells the adaptive limit that an admitted request ended
// without a first token on a sign of upstream overload.
func (a *admission) observeDrop(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.q.ObserveDrop(now)
	a.drops++
	a.changedLocked()
}

// overloadStatus reports whether an admitted request that got no first
// token failed on a sign of upstream overload: a 429 or 503 answer, or a
// timeout (504).
func overloadStatus(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout
}

func (a *admission) changedLocked() {
	if s := a.shared; s != nil && s.open {
		s.held = a.q.InFlight()
	}
	if a.onChange != nil {
		a.onChange(a.q.Depth(), a.q.InFlight(), a.q.Limit())
	}
}

// fed returns how many first tokens and drops the adaptive limit was fed.
func (a *admission) fed() (firstTokens, drops int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.firstTokens, a.drops
}

// snapshot returns the queue's state, for tests and the debug endpoint.
func (a *admission) snapshot() (depth, inflight int, limit float64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.q.Depth(), a.q.InFlight(), a.q.Limit()
}
