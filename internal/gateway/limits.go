package gateway

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limiter enforces one API key's limits (KeyConfig's requests per second
// and tokens per minute). Allow charges one request of tokens when both
// limits allow it (neither is charged otherwise) and returns the
// decision. The gateway's own are in-process token buckets
// (NewLocalLimiter) and, with a configured redis, the same buckets held in
// Redis for every gateway replica; another implementation slots in
// through Gateway.NewLimiter. ctx bounds a limiter that calls out.
// Implementations must be safe for concurrent use.
type Limiter interface {
	Allow(ctx context.Context, now time.Time, tokens int) LimitDecision
}

// LimitDecision is a Limiter's answer for one request.
type LimitDecision struct {
	Allowed bool
	// Unchecked is set when the limits could not be consulted (their
	// store is unreachable) and the failure policy decided: Allowed
	// under fail_open, refused (503) under fail_closed.
	Unchecked bool
	// Wait is how long until the request would be allowed, when it was not.
	Wait time.Duration
	// Requests and Tokens are the state the x-ratelimit-* headers report;
	// a zero Limit means that limit is not set.
	Requests, Tokens Quota
}

// Quota is one limit's state after a decision.
type Quota struct {
	Limit     int64         // the bucket's capacity
	Remaining int64         // what is left now
	Reset     time.Duration // until the bucket is full again, or Wait on refusal
}

// NewLocalLimiter returns the in-process limiter of k: token buckets
// (golang.org/x/time/rate) of RequestsPerSecond with capacity Burst
// (default max(1, rate), rounded down) and of TokensPerMinute with
// capacity TokensPerMinute. A request of more tokens than the capacity
// waits for a full bucket.
func NewLocalLimiter(k KeyConfig) Limiter {
	l := &localLimiter{}
	req, tok := k.buckets()
	if req.rate > 0 {
		l.requests = rate.NewLimiter(rate.Limit(req.rate), req.burst)
	}
	if tok.rate > 0 {
		l.tokens = rate.NewLimiter(rate.Limit(tok.rate), tok.burst)
	}
	return l
}

// bucket is one token bucket's rate per second and capacity; rate 0 is
// no limit.
type bucket struct {
	rate  float64
	burst int
}

// buckets are k's request bucket (RequestsPerSecond, capacity Burst,
// default max(1, rate) rounded down) and token bucket (TokensPerMinute /
// 60 per second, capacity TokensPerMinute), in-process or in Redis alike.
func (k KeyConfig) buckets() (requests, tokens bucket) {
	if k.RequestsPerSecond > 0 {
		burst := k.Burst
		if burst == 0 {
			burst = int(math.Max(1, k.RequestsPerSecond))
		}
		requests = bucket{k.RequestsPerSecond, burst}
	}
	if k.TokensPerMinute > 0 {
		tokens = bucket{float64(k.TokensPerMinute) / 60, k.TokensPerMinute}
	}
	return requests, tokens
}

// localLimiter is NewLocalLimiter's: two buckets read and charged under
// one mutex, so that a request is charged to both or to neither.
type localLimiter struct {
	mu       sync.Mutex
	requests *rate.Limiter // nil = unlimited
	tokens   *rate.Limiter
}

func (l *localLimiter) Allow(_ context.Context, now time.Time, tokens int) LimitDecision {
	l.mu.Lock()
	defer l.mu.Unlock()
	nT := 0
	if l.tokens != nil {
		nT = min(tokens, l.tokens.Burst())
	}
	waitR, waitT := shortfall(l.requests, now, 1), shortfall(l.tokens, now, nT)
	d := LimitDecision{Allowed: waitR == 0 && waitT == 0, Wait: max(waitR, waitT)}
	if d.Allowed {
		if l.requests != nil {
			l.requests.AllowN(now, 1)
		}
		if l.tokens != nil {
			l.tokens.AllowN(now, nT)
		}
	}
	d.Requests, d.Tokens = quota(l.requests, now, waitR), quota(l.tokens, now, waitT)
	return d
}

// Settle implements TokenSettler: of a request charged charged tokens
// (Allow took at most the bucket's capacity of them) that used used,
// what it used beyond the charge is taken from the token bucket even
// below empty, down to −capacity (later requests wait it out), or what
// it did not use is given back, up to a full bucket.
func (l *localLimiter) Settle(_ context.Context, now time.Time, charged, used int) {
	if l.tokens == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	burst := l.tokens.Burst()
	level := l.tokens.TokensAt(now)
	delta := used - min(max(charged, 0), burst)
	switch {
	case delta > 0:
		// Granted at once: the level goes below 0, never below −burst.
		if owe := min(delta, int(level+float64(burst))); owe > 0 {
			l.tokens.ReserveN(now, owe)
		}
	case delta < 0:
		if back := min(-delta, int(float64(burst)-level)); back > 0 {
			// A reservation of −back raises the level by back (rate.Limiter
			// subtracts what is reserved); never past the burst.
			l.tokens.ReserveN(now, -back)
		}
	}
}

// shortfall is how long until b holds n tokens (0: it does now, or b is
// nil).
func shortfall(b *rate.Limiter, now time.Time, n int) time.Duration {
	if b == nil {
		return 0
	}
	lack := float64(n) - b.TokensAt(now)
	if lack <= 0 {
		return 0
	}
	return time.Duration(lack / float64(b.Limit()) * float64(time.Second))
}

// quota is b's state at now for the headers; wait is the refusal's wait
// (0 when allowed).
func quota(b *rate.Limiter, now time.Time, wait time.Duration) Quota {
	if b == nil {
		return Quota{}
	}
	level := b.TokensAt(now)
	reset := wait
	if reset == 0 {
		reset = time.Duration((float64(b.Burst()) - level) / float64(b.Limit()) * float64(time.Second))
	}
	return Quota{Limit: int64(b.Burst()), Remaining: int64(math.Max(0, level)), Reset: reset}
}

// setLimitHeaders sets the OpenAI-style x-ratelimit-* headers of each
// limit d reports.
func setLimitHeaders(h http.Header, d LimitDecision) {
	for _, q := range []struct {
		what string
		q    Quota
	}{{"requests", d.Requests}, {"tokens", d.Tokens}} {
		if q.q.Limit == 0 {
			continue
		}
		h.Set("X-Ratelimit-Limit-"+q.what, strconv.FormatInt(q.q.Limit, 10))
		h.Set("X-Ratelimit-Remaining-"+q.what, strconv.FormatInt(q.q.Remaining, 10))
		h.Set("X-Ratelimit-Reset-"+q.what, q.q.Reset.Round(time.Millisecond).String())
	}
}
