package gateway

import (
	"fmt"
	"net/http"

	"github.com/tokentrace/tokentrace/internal/openai"
)

// lengthControl is the route's length policy: input over
// max_input_tokens is refused; a request without max_tokens gets
// default_max_tokens, else max_max_tokens; one over max_max_tokens is
// refused or clamped (on_exceed).
type lengthControl struct{}

func (lengthControl) apply(x *exchange) *rejection {
	l := x.route.Length
	if l.MaxInputTokens > 0 && x.req.InputTokens() > l.MaxInputTokens {
		return shed("input_too_long", http.StatusBadRequest, openai.TypeInvalidRequest,
			fmt.Sprintf("the prompt has about %d tokens, over this route's limit of %d", x.req.InputTokens(), l.MaxInputTokens), 0)
	}
	field := x.req.MaxTokensField
	if field == "" {
		field = "max_tokens"
	}
	switch {
	case x.req.MaxTokens == 0 && l.DefaultMaxTokens > 0:
		x.req.MaxTokens = l.DefaultMaxTokens
		x.setField(field, l.DefaultMaxTokens)
	case x.req.MaxTokens == 0 && l.MaxMaxTokens > 0:
		// Absent: as much as the route allows, sent and charged as such
		// (omitting the field neither escapes the cap nor the key's
		// token limit).
		x.req.MaxTokens = l.MaxMaxTokens
		x.setField(field, l.MaxMaxTokens)
	case l.MaxMaxTokens > 0 && x.req.MaxTokens > l.MaxMaxTokens:
		if l.OnExceed != "clamp" {
			return shed("max_tokens", http.StatusBadRequest, openai.TypeInvalidRequest,
				fmt.Sprintf("%s is %d, over this route's limit of %d", field, x.req.MaxTokens, l.MaxMaxTokens), 0)
		}
		x.req.MaxTokens = l.MaxMaxTokens
		x.setField(field, l.MaxMaxTokens)
	}
	return nil
}
