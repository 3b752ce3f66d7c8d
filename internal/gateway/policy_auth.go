package gateway

import (
	"net/http"
	"strings"

	"github.com/tokentrace/tokentrace/internal/openai"
)

// authenticate checks the API key when the configuration has keys: the
// request must carry one of them (Authorization: Bearer KEY, or X-Api-Key:
// KEY as Anthropic's clients send it without Authorization; compared by
// its SHA-256); the key's settings (priority, limits) follow the request.
type authenticate struct{}

func (authenticate) apply(x *exchange) *rejection {
	if len(x.rt.keys) == 0 {
		return nil
	}
	var key string
	if h := x.r.Header.Get("Authorization"); h != "" {
		scheme, k, _ := strings.Cut(h, " ")
		if strings.EqualFold(scheme, "Bearer") { // the scheme is case-insensitive (RFC 9110 §11.1)
			key = k
		}
	} else {
		key = x.r.Header.Get("X-Api-Key") // the Messages API's own header
	}
	if strings.TrimSpace(key) == "" {
		return refuse(http.StatusUnauthorized, openai.TypeAuthentication, "missing API key: send Authorization: Bearer KEY or X-Api-Key: KEY", "", "missing_api_key")
	}
	ks := x.rt.keys[HashKey(strings.TrimSpace(key))]
	if ks == nil {
		return refuse(http.StatusUnauthorized, openai.TypeAuthentication, "invalid API key", "", "invalid_api_key")
	}
	x.key = ks
	return nil
}
