package gateway

import (
	"strings"
	"testing"
)

func TestReadBody(t *testing.T) {
	small := onePool + anyRoute + "server: {max_body_bytes: 64}\n"
	for _, c := range []struct {
		name, body, code string
		status           int
		contentLength    int64
	}{
		{"ok", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "", 0, -1},
		{"too large", `{"model":"` + strings.Repeat("x", 100) + `"}`, "body_too_large", 413, -1},
		{"not JSON", `{"model":`, "invalid_request", 400, -1},
		{"longer than announced", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "bad_body", 400, 5},
	} {
		x := policyExchange(t, small, c.body, nil)
		if c.contentLength >= 0 {
			x.r.ContentLength = c.contentLength
		}
		r := readBody{}.apply(x)
		if c.code == "" {
			if r != nil || x.req.Model != "m" || string(x.body) != c.body {
				t.Errorf("%s: %+v, model %q, body %q", c.name, r, x.req.Model, x.body)
			}
			continue
		}
		if r == nil || r.code != c.code || r.status != c.status {
			t.Errorf("%s: %+v, want %d %s", c.name, r, c.status, c.code)
		}
	}
}
