package gateway

import (
	"encoding/json"
	"testing"
)

func TestRouteAndUpstreamModel(t *testing.T) {
	cfg := "pools: [{name: p, replicas: [{url: \"http://127.0.0.1:1\", models: [listed]}]}, {name: long, replicas: [{url: \"http://127.0.0.1:2\"}]}]\n" +
		"routes: [{model: alias, pool: p, upstream_model: real}, {model: banded, length_pools: [{max_input_tokens: 4, pool: p}, {pool: long}]}]\n"
	for _, c := range []struct {
		name, body, pool, model, code string
	}{
		{"alias renamed", `{"model":"alias","messages":[{"role":"user","content":"hi"}]}`, "p", "real", ""},
		{"replica-listed model kept", `{"model":"listed","messages":[{"role":"user","content":"hi"}]}`, "p", "listed", ""},
		{"short prompt: first band", `{"model":"banded","messages":[{"role":"user","content":"hi"}]}`, "p", "banded", ""},
		{"long prompt: last band", `{"model":"banded","messages":[{"role":"user","content":"one two three four five six"}]}`, "long", "banded", ""},
		{"unknown model", `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`, "", "", "model_not_found"},
	} {
		x := policyExchange(t, cfg, c.body, nil)
		r := through(x, readBody{}, routeRequest{}, upstreamModel{}, rewriteBody{})
		if c.code != "" {
			if r == nil || r.code != c.code || r.status != 404 || r.param != "model" {
				t.Errorf("%s: %+v, want 404 %s", c.name, r, c.code)
			}
			continue
		}
		var sent struct{ Model string }
		if r != nil || json.Unmarshal(x.body, &sent) != nil || x.pool.name != c.pool || sent.Model != c.model {
			t.Errorf("%s: %+v, pool %v, body %s; want pool %s, model %s", c.name, r, x.pool.name, x.body, c.pool, c.model)
		}
	}
	if got := (&RouteConfig{Model: "a"}).upstreamName("client's"); got != "client's" {
		t.Errorf("no upstream_model: %q, want the name asked", got)
	}
}
