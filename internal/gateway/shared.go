package gateway

import (
	"context"
	"errors"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/tokentrace/tokentrace/internal/redisstate"
)

// What the shared Redis is used for (the use label of its metrics).
const (
	useLimits    = "limits"
	useAdmission = "admission"
)

// sharedPoll is how often a gateway replica whose requests wait for a
// shared slot asks Redis again.
const sharedPoll = 10 * time.Millisecond

// errSharedUnavailable refuses a request to a shared pool while Redis is
// unreachable under fail_closed (503).
var errSharedUnavailable = errors.New("the pool's shared concurrency limit cannot be checked: redis is unreachable (redis.on_error: fail_closed)")

// redisRuntime is a live configuration's Redis: its settings and client.
type redisRuntime struct {
	cfg    RedisConfig
	client *redisstate.Client
}

// openRedis returns the Redis of cfg (nil when none): old's when its
// settings are unchanged, so that a reload keeps the connections and the
// reachability state, else a new client (which connects on first use).
func (g *Gateway) openRedis(old *liveConfig, cfg *RedisConfig) (*redisRuntime, error) {
	if cfg == nil {
		return nil, nil
	}
	if old != nil && old.redis != nil && old.redis.cfg == *cfg {
		return old.redis, nil
	}
	rr := &redisRuntime{cfg: *cfg}
	c, err := redisstate.Open(redisstate.Config{URL: cfg.url(), Timeout: cfg.Timeout.D(), RetryInterval: cfg.RetryInterval.D(),
		KeyPrefix: cfg.KeyPrefix, OnChange: func(up bool, err error) { g.redisChanged(rr, up, err) }})
	if err != nil {
		return nil, err
	}
	rr.client = c
	return rr, nil
}

// redisChanged says, once per change, that Redis became unreachable (warn,
// with the reason and what on_error now decides) or reachable again.
func (g *Gateway) redisChanged(rr *redisRuntime, up bool, err error) {
	if m := g.Metrics; m != nil {
		v := 0.0
		if up {
			v = 1
		}
		m.RedisUp.WithLabelValues().Set(v)
	}
	if up {
		g.log().Info("redis reachable again: limits and shared pools use it")
		return
	}
	decides := "allowed, and shared pools admit under their own limit"
	if rr.cfg.OnError == FailClosed {
		decides = "refused with 503"
	}
	g.log().Warn("redis unreachable: requests are "+decides+" until it answers", "on_error", rr.cfg.OnError,
		"retry_interval", rr.cfg.RetryInterval.D().String(), "err", err)
}

// fallback counts a request decided by on_error because Redis failed with
// err, and returns the decision: allowed under fail_open.
func (g *Gateway) fallback(rr *redisRuntime, use string, err error) bool {
	allowed := rr.cfg.OnError != FailClosed
	if m := g.Metrics; m != nil {
		if err != nil && !errors.Is(err, redisstate.ErrUnavailable) {
			m.RedisErrors.WithLabelValues(use).Inc()
		}
		m.RedisFallback.WithLabelValues(use, decisionLabel(allowed)).Inc()
	}
	return allowed
}

func decisionLabel(allowed bool) string {
	if allowed {
		return "allowed"
	}
	return "refused"
}

// redisLimiter is a key's limits held in Redis: NewLocalLimiter's token
// buckets, charged by one script on the Redis server's clock, so that one
// key's limits hold across every replica using that Redis.
type redisLimiter struct {
	g        *Gateway
	rr       *redisRuntime
	key      string
	req, tok redisstate.Bucket
	// atNow decides at the now Allow is given instead of the server's
	// clock (tests comparing it with the in-process buckets).
	atNow bool
}

func (g *Gateway) newRedisLimiter(rr *redisRuntime, k KeyConfig) Limiter {
	req, tok := k.buckets()
	return &redisLimiter{g: g, rr: rr, key: rr.client.BucketKey(k.SHA256),
		req: redisstate.Bucket{Rate: req.rate, Burst: req.burst}, tok: redisstate.Bucket{Rate: tok.rate, Burst: tok.burst}}
}

// Allow implements Limiter. now is not used: the buckets run on the Redis
// server's clock, which every replica shares.
func (l *redisLimiter) Allow(ctx context.Context, now time.Time, tokens int) LimitDecision {
	var at time.Time
	if l.atNow {
		at = now
	}
	t, err := l.rr.client.Take(ctx, l.key, l.req, l.tok, tokens, at)
	if err != nil {
		if ctx.Err() != nil { // the client left: nothing to decide, nothing to count
			return LimitDecision{Unchecked: true}
		}
		if errors.Is(err, redisstate.ErrData) {
			// This key's stored state is unusable (the script repairs what
			// it can): on_error decides for this key's request only; Redis
			// stays in use for every other key.
			l.g.log().Warn("redis: this key's limits hold data that cannot be used; on_error decides for its requests",
				"redis_key", l.key, "on_error", l.rr.cfg.OnError, "err", err)
		}
		return LimitDecision{Allowed: l.g.fallback(l.rr, useLimits, err), Unchecked: true, Wait: l.rr.cfg.RetryInterval.D()}
	}
	if t.Repaired {
		l.g.log().Warn("redis: this key's limits held corrupt state (a value of another type or not a number); reset to full buckets",
			"redis_key", l.key)
	}
	d := LimitDecision{Allowed: t.Allowed, Wait: t.Wait}
	if l.req.Rate > 0 {
		d.Requests = Quota{Limit: int64(l.req.Burst), Remaining: t.Requests.Remaining, Reset: t.Requests.Reset}
	}
	if l.tok.Rate > 0 {
		d.Tokens = Quota{Limit: int64(l.tok.Burst), Remaining: t.Tokens.Remaining, Reset: t.Tokens.Reset}
	}
	return d
}

// Settle implements TokenSettler: the settlement is one script on the
// Redis server (redisstate.Client.Settle), atomic with every replica's
// charges. When Redis cannot be reached the settlement is dropped (the
// admission charge stands) and counted among the errors.
func (l *redisLimiter) Settle(ctx context.Context, now time.Time, charged, used int) {
	delta := used - min(max(charged, 0), l.tok.Burst)
	if l.tok.Rate <= 0 || delta == 0 {
		return
	}
	var at time.Time
	if l.atNow {
		at = now
	}
	_, repaired, err := l.rr.client.Settle(ctx, l.key, l.tok, delta, at)
	switch {
	case err != nil:
		if m := l.g.Metrics; m != nil && !errors.Is(err, redisstate.ErrUnavailable) {
			m.RedisErrors.WithLabelValues(useLimits).Inc()
		}
	case repaired:
		l.g.log().Warn("redis: this key's limits held corrupt state (a value of another type or not a number); reset to full buckets",
			"redis_key", l.key)
	}
}

// sharedSlots is a shared pool's part of its limit (queue.shared): the
// admission queue admits no more requests than the slots this replica
// holds, which Redis grants out of the pool's limit across replicas.
// Its fields are guarded by the admission's mutex, except pump.
type sharedSlots struct {
	limit  int  // the pool's limit across replicas
	held   int  // slots granted and not yet returned
	open   bool // Redis unreachable under fail_open: no ceiling, held follows in flight
	closed bool // Redis unreachable under fail_closed: new requests refused
	retry  time.Duration
	kick   chan struct{} // a request queued or released: report now
	// refuse is closed when closed turns on, so that the requests then
	// waiting are refused too; a fresh one replaces it when Redis answers.
	refuse chan struct{}

	// pump serialises the reports (one per call to Redis, read, call,
	// apply), so that a report never overtakes a later one.
	pump sync.Mutex
}

func newSharedSlots(limit int) *sharedSlots {
	return &sharedSlots{limit: limit, kick: make(chan struct{}, 1), refuse: make(chan struct{})}
}

// kickLocked asks the shared pool's loop to report now.
func (a *admission) kickLocked() {
	if s := a.shared; s != nil {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// setSharedLocked turns the pool's sharing on (limit > 0) or off. The
// requests in flight when it turns on hold slots.
func (a *admission) setSharedLocked(limit int) {
	switch {
	case limit <= 0:
		if a.shared != nil {
			a.shared = nil
			a.q.SetCeiling(-1)
		}
	case a.shared == nil:
		a.shared = newSharedSlots(limit)
		a.shared.held = a.q.InFlight()
		a.q.SetCeiling(a.shared.held)
	default:
		a.shared.limit = limit
	}
}

// report is this replica's next report on s: the slots it holds (spare
// ones, for requests that left the queue, returned) and how many more it
// wants: one per waiting request, up to its own limit. Under fail_open it
// reports what is in flight and asks for nothing until Redis answers.
func (a *admission) report(s *sharedSlots) (held, want int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	inflight := a.q.InFlight()
	if s.open {
		s.held = inflight
		return s.held, 0
	}
	local := int(math.Max(1, math.Floor(a.q.Limit())))
	target := max(inflight, min(local, inflight+a.q.Depth()))
	if s.held > target {
		s.held = target
		a.q.SetCeiling(s.held)
	}
	return s.held, target - s.held
}

// apply takes Redis's answer to a report that asked for want slots (or
// its failure) and returns when to report next: soon while requests wait
// for a slot, every ttl / 3 while it holds slots, never (0) when idle.
func (a *admission) apply(s *sharedSlots, want int, ans redisstate.SlotsAnswer, err error, onError string, ttl time.Duration) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	defer a.changedLocked()
	if err != nil {
		if onError == FailClosed {
			if !s.closed {
				s.closed = true
				close(s.refuse)
			}
		} else if !s.open {
			s.open = true
			s.held = a.q.InFlight()
			a.q.SetCeiling(-1)
		}
		return s.retry
	}
	if s.open {
		s.open = false
		s.held = a.q.InFlight()
	}
	if s.closed {
		s.closed = false
		s.refuse = make(chan struct{})
	}
	s.held += ans.Granted
	a.q.SetCeiling(s.held)
	switch {
	case ans.Granted < want:
		return sharedPoll
	case s.held > 0 || a.q.Depth() > 0:
		return ttl / 3
	}
	return 0
}

// replicaID names this gateway replica among those sharing a pool: the
// host name (the pod's, in Kubernetes) and the process's request-ID
// prefix, which is random.
func (g *Gateway) replicaID() string {
	host, _ := os.Hostname()
	return host + "/" + strings.TrimSuffix(g.idPrefix, "-")
}

// shareLoop keeps a shared pool's slots until ctx ends: it reports when a
// request queues or releases, and on apply's schedule. When ctx ends it
// reports once more, asking for nothing (a gateway that closes after its
// requests finished leaves the pool).
func (g *Gateway) shareLoop(ctx context.Context, p *pool, s *sharedSlots, rr *redisRuntime) {
	a, id := p.adm, g.replicaID()
	ttl := rr.cfg.LeaseTTL.D()
	a.mu.Lock()
	s.retry = rr.cfg.RetryInterval.D()
	a.mu.Unlock()
	var inUse func(float64)
	if m := g.Metrics; m != nil {
		inUse = m.SharedInUse.WithLabelValues(p.name).Set
	}
	report := func(ctx context.Context, final bool) time.Duration {
		s.pump.Lock()
		defer s.pump.Unlock()
		held, want := a.report(s)
		if final {
			want = 0
		}
		ans, err := rr.client.Slots(ctx, redisstate.SlotsRequest{Pool: p.name, Replica: id, Held: held, Want: want, Limit: s.limit, TTL: ttl})
		if err != nil && ctx.Err() != nil {
			return 0
		}
		if err == nil && inUse != nil {
			inUse(float64(ans.InUse))
		}
		switch {
		case err == nil && ans.Repaired:
			g.log().Warn("redis: the pool's shared slots held corrupt state (a key of another type, a count that is no number); dropped",
				"pool", p.name)
		case errors.Is(err, redisstate.ErrData):
			g.log().Warn("redis: the pool's shared slots hold data that cannot be used; on_error decides for this pool",
				"pool", p.name, "on_error", rr.cfg.OnError, "err", err)
		}
		if err != nil && !errors.Is(err, redisstate.ErrUnavailable) && g.Metrics != nil {
			g.Metrics.RedisErrors.WithLabelValues(useAdmission).Inc()
		}
		return a.apply(s, want, ans, err, rr.cfg.OnError, ttl)
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), rr.client.Timeout())
			report(fctx, true)
			cancel()
			return
		case <-s.kick:
		case <-timer.C:
		}
		if next := report(ctx, false); next > 0 {
			timer.Reset(next)
		} else {
			timer.Stop()
		}
	}
}
