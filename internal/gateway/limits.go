package gateway

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// bucket is a token bucket: capacity cap, refilled at rate per second.
type bucket struct {
	cap, rate float64
	level     float64
	at        time.Time
}

func (b *bucket) refill(now time.Time) {
	if b.at.IsZero() {
		b.level, b.at = b.cap, now
		return
	}
	if dt := now.Sub(b.at).Seconds(); dt > 0 {
		b.level = math.Min(b.cap, b.level+dt*b.rate)
		b.at = now
	}
}

// take removes n if available; otherwise it returns how long until n are.
func (b *bucket) take(now time.Time, n float64) (ok bool, wait time.Duration) {
	b.refill(now)
	if n > b.cap {
		n = b.cap // a request larger than the bucket waits for a full one
	}
	if b.level >= n {
		b.level -= n
		return true, 0
	}
	return false, time.Duration((n - b.level) / b.rate * float64(time.Second))
}

// keyLimiter enforces one API key's requests/s and tokens/min.
type keyLimiter struct {
	mu       sync.Mutex
	requests *bucket // nil = unlimited
	tokens   *bucket
}

func newKeyLimiter(k KeyConfig) *keyLimiter {
	l := &keyLimiter{}
	if k.RequestsPerSecond > 0 {
		burst := float64(k.Burst)
		if burst == 0 {
			burst = math.Max(1, k.RequestsPerSecond)
		}
		l.requests = &bucket{cap: burst, rate: k.RequestsPerSecond}
	}
	if k.TokensPerMinute > 0 {
		l.tokens = &bucket{cap: float64(k.TokensPerMinute), rate: float64(k.TokensPerMinute) / 60}
	}
	return l
}

// allow charges one request of tokens; on refusal it returns the wait.
// It sets the OpenAI-style x-ratelimit-* headers on h either way.
func (l *keyLimiter) allow(now time.Time, tokens int, h http.Header) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	okR, okT := true, true
	var waitR, waitT time.Duration
	if l.requests != nil {
		l.requests.refill(now)
		okR = l.requests.level >= 1
		if !okR {
			waitR = time.Duration((1 - l.requests.level) / l.requests.rate * float64(time.Second))
		}
	}
	if l.tokens != nil {
		l.tokens.refill(now)
		n := math.Min(float64(tokens), l.tokens.cap)
		okT = l.tokens.level >= n
		if !okT {
			waitT = time.Duration((n - l.tokens.level) / l.tokens.rate * float64(time.Second))
		}
	}
	ok := okR && okT
	if ok { // charge both only when both allow
		if l.requests != nil {
			l.requests.take(now, 1)
		}
		if l.tokens != nil {
			l.tokens.take(now, float64(tokens))
		}
	}
	if l.requests != nil {
		setLimitHeaders(h, "requests", l.requests, waitR)
	}
	if l.tokens != nil {
		setLimitHeaders(h, "tokens", l.tokens, waitT)
	}
	return ok, max(waitR, waitT)
}

func setLimitHeaders(h http.Header, what string, b *bucket, wait time.Duration) {
	h.Set("X-Ratelimit-Limit-"+what, strconv.FormatInt(int64(b.cap), 10))
	h.Set("X-Ratelimit-Remaining-"+what, strconv.FormatInt(int64(math.Max(0, b.level)), 10))
	reset := wait
	if reset == 0 {
		reset = time.Duration((b.cap - b.level) / b.rate * float64(time.Second))
	}
	h.Set("X-Ratelimit-Reset-"+what, reset.Round(time.Millisecond).String())
}
