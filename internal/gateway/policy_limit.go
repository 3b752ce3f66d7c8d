package gateway

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/tokentrace/tokentrace/internal/openai"
)

// keyLimits charges the request to its key's limits (Limiter): one
// request, and its input estimate + n × max_tokens as tokens (each of
// its n answers may run to max_tokens; without max_tokens, as length
// control left it, to the pool's context_tokens less the input); once
// answered, the charge is
// settled with what the answer used (settleTokens). The x-ratelimit-*
// headers report them on every answer to the key. Limits that cannot be
// checked (their store unreachable, fail_closed) refuse with 503.
type keyLimits struct{}

func (keyLimits) apply(x *exchange) *rejection {
	if x.key == nil || x.key.lim == nil {
		return nil
	}
	out := x.req.MaxTokens
	if out == 0 && x.pool != nil && x.pool.cfg.ContextTokens > 0 {
		// No max_tokens and no route default: each answer may run to the
		// context left after the input.
		out = max(x.pool.cfg.ContextTokens-x.req.InputTokens(), 0)
	}
	if c := int(x.req.Choices); c > 1 { // n × max_tokens, bounded (n and max_tokens are the client's)
		out = int(min(int64(min(out, math.MaxInt32))*int64(c), math.MaxInt32))
	}
	charge := x.req.InputTokens() + out
	d := x.key.lim.Allow(x.r.Context(), x.g.now(), charge)
	if d.Allowed && !d.Unchecked {
		x.chargedTokens, x.charged = int32(min(charge, math.MaxInt32)), true
	}
	setLimitHeaders(x.w.Header(), d)
	if !d.Allowed && d.Unchecked {
		return shed("limits_unavailable", http.StatusServiceUnavailable, openai.TypeServer,
			"the key's limits cannot be checked: their store is unreachable or holds unusable data for this key; retry later", d.Wait)
	}
	if !d.Allowed {
		return shed("rate_limit", http.StatusTooManyRequests, openai.TypeRateLimit,
			fmt.Sprintf("rate limit reached for key %q; retry after %s", x.key.cfg.Name, d.Wait.Round(time.Millisecond)), d.Wait)
	}
	return nil
}

// TokenSettler is a Limiter that can settle a request's token charge
// afterwards: of the charged tokens Allow was given, the request used
// used; Settle takes what it used beyond the charge or, when it used
// less, gives the rest back, refusing nothing. The in-process limiter and
// the Redis one are TokenSettlers. ctx bounds a settler that calls out.
type TokenSettler interface {
	Settle(ctx context.Context, now time.Time, charged, used int)
}

// settleTokens settles the key's token charge with what the answer
// used: its usage's prompt_tokens (else the input estimate) and
// completion_tokens (else its content events counted), against the input
// estimate + n × max_tokens charged at admission — a request refused or cut after admission gives back what
// it did not use, one without max_tokens is charged what it used. It runs
// after the answer, even when the client has gone (bounded by the
// limiter, Redis's timeout for the Redis one).
func (x *exchange) settleTokens() {
	if !x.charged || x.key == nil {
		return
	}
	x.charged = false
	s, ok := x.key.lim.(TokenSettler)
	if !ok {
		return
	}
	in := x.req.InputTokens()
	if x.promptTokens > 0 { // the engine's count replaces the estimate
		in = int(x.promptTokens)
	}
	used := in + x.tokens
	if used != int(x.chargedTokens) {
		s.Settle(context.WithoutCancel(x.r.Context()), x.g.now(), int(x.chargedTokens), used)
	}
}
