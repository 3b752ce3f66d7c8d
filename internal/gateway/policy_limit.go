package gateway

import (
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/tokentrace/tokentrace/internal/openai"
)

// keyLimits charges the request to its key's limits (Limiter): one
// request, and its input estimate + n × max_tokens as tokens (each of
// its n answers may run to max_tokens); once answered, the charge is
// settled with what the answer used (settleTokens). The x-ratelimit-*
// headers report them on every answer to the key. Limits that cannot be
// checked (their store unreachable, fail_closed) refuse with 503.
type keyLimits struct{}

func (keyLimits) apply(x *exchange) *rejection {
	if x.key == nil || x.key.lim == nil {
		return nil
	}
	out := x.req.MaxTokens
	if c := int(x.req.Choices); c > 1 { // n × max_tokens, bounded (n and max_tokens are the client's)
		out = int(min(int64(min(out, math.MaxInt32))*int64(c), math.MaxInt32))
	}
	d := x.key.lim.Allow(x.r.Context(), x.g.now(), x.req.InputTokens()+out)
	if d.Allowed && !d.Unchecked {
		x.chargedOut, x.charged = int32(min(out, math.MaxInt32)), true
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
// afterwards: Settle charges tokens more (the answer used more than was
// charged at admission) or, when negative, gives them back, refusing
// nothing. The in-process limiter is one.
type TokenSettler interface {
	Settle(now time.Time, tokens int)
}

// settleTokens settles the key's token charge with the answer's output:
// its usage's completion_tokens (else its content events counted)
// against the n × max_tokens charged at admission — a request refused
// or cut after admission gives back what it did not use, one without
// max_tokens is charged what it used.
func (x *exchange) settleTokens() {
	if !x.charged || x.key == nil {
		return
	}
	x.charged = false
	if s, ok := x.key.lim.(TokenSettler); ok && x.tokens != int(x.chargedOut) {
		s.Settle(x.g.now(), x.tokens-int(x.chargedOut))
	}
}
