package gateway

import (
	"fmt"
	"net/http"
	"time"

	"github.com/tokentrace/tokentrace/internal/openai"
)

// keyLimits charges the request to its key's limits (Limiter): one
// request, and its input estimate + max_tokens as tokens. The
// x-ratelimit-* headers report them on every answer to the key. Limits
// that cannot be checked (their store unreachable, fail_closed) refuse
// with 503.
type keyLimits struct{}

func (keyLimits) apply(x *exchange) *rejection {
	if x.key == nil || x.key.lim == nil {
		return nil
	}
	d := x.key.lim.Allow(x.r.Context(), x.g.now(), x.req.InputTokens()+x.req.MaxTokens)
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
