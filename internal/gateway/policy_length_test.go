package gateway

import (
	"encoding/json"
	"testing"
)

func TestLengthControlPolicy(t *testing.T) {
	for _, c := range []struct {
		name, length, extra string
		want                any // max_tokens sent upstream (nil: unchanged, absent)
		reason              string
	}{
		{"no limits", "{}", "", nil, ""},
		{"default added", "{default_max_tokens: 64}", "", float64(64), ""},
		{"default not over a given one", "{default_max_tokens: 64}", `,"max_tokens":9`, float64(9), ""},
		{"over the limit refused", "{max_max_tokens: 100}", `,"max_tokens":101`, nil, "max_tokens"},
		{"over the limit clamped", "{max_max_tokens: 100, on_exceed: clamp}", `,"max_tokens":101`, float64(100), ""},
		{"at the limit", "{max_max_tokens: 100}", `,"max_tokens":100`, float64(100), ""},
		{"input too long", "{max_input_tokens: 3}", "", nil, "input_too_long"},
	} {
		cfg := onePool + "routes: [{model: \"*\", pool: p, length: " + c.length + "}]\n"
		x := policyExchange(t, cfg, `{"model":"m","messages":[{"role":"user","content":"one two three four"}]`+c.extra+`}`, nil)
		r := through(x, readBody{}, routeRequest{}, lengthControl{}, rewriteBody{})
		if c.reason != "" {
			if r == nil || r.reason != c.reason || r.status != 400 {
				t.Errorf("%s: %+v, want 400 %s", c.name, r, c.reason)
			}
			continue
		}
		var sent map[string]any
		if r != nil || json.Unmarshal(x.body, &sent) != nil || sent["max_tokens"] != c.want {
			t.Errorf("%s: %+v, sent %s, want max_tokens %v", c.name, r, x.body, c.want)
		}
	}
}
