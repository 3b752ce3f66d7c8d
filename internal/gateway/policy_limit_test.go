package gateway

import (
	"context"
	"testing"
	"time"
)

// fixedLimiter answers every request with its decision and records the
// tokens it was asked for.
type fixedLimiter struct {
	d      LimitDecision
	tokens []int
}

func (f *fixedLimiter) Allow(_ context.Context, _ time.Time, tokens int) LimitDecision {
	f.tokens = append(f.tokens, tokens)
	return f.d
}

func TestKeyLimits(t *testing.T) {
	body := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	q := Quota{Limit: 5, Remaining: 0, Reset: 1500 * time.Millisecond}
	for _, c := range []struct {
		name string
		lim  *fixedLimiter
		ok   bool
	}{
		{"no key", nil, true},
		{"allowed", &fixedLimiter{d: LimitDecision{Allowed: true, Requests: q}}, true},
		{"refused", &fixedLimiter{d: LimitDecision{Wait: 1500 * time.Millisecond, Requests: q}}, false},
	} {
		x := policyExchange(t, onePool+anyRoute, body, nil)
		if c.lim != nil {
			x.key = &keyState{cfg: KeyConfig{Name: "k"}, lim: c.lim}
		}
		r := through(x, readBody{}, routeRequest{}, keyLimits{})
		if c.ok != (r == nil) {
			t.Fatalf("%s: %+v", c.name, r)
		}
		if !c.ok && (r.reason != "rate_limit" || r.status != 429 || r.retryAfter != 1500*time.Millisecond) {
			t.Errorf("%s: %+v, want 429 rate_limit after 1.5 s", c.name, r)
		}
		if c.lim == nil {
			continue
		}
		// Charged a request of its input estimate (a role and "hi") + max_tokens.
		if len(c.lim.tokens) != 1 || c.lim.tokens[0] != 2+10 || x.w.Header().Get("X-Ratelimit-Reset-Requests") != "1.5s" {
			t.Errorf("%s: asked %v, headers %v", c.name, c.lim.tokens, x.w.Header())
		}
	}
}
