package gateway

import (
	"fmt"
	"testing"
)

func TestAuthenticate(t *testing.T) {
	keys := fmt.Sprintf("keys: [{name: a, sha256: %s, priority: 3}]\n", HashKey("k-a"))
	for _, c := range []struct {
		name, yaml, auth, code string
		apiKey                 string // X-Api-Key
	}{
		{"no keys configured", onePool, "", "", ""},
		{"missing", onePool + keys, "", "missing_api_key", ""},
		{"not bearer", onePool + keys, "Basic k-a", "missing_api_key", ""},
		{"unknown", onePool + keys, "Bearer k-b", "invalid_api_key", ""},
		{"known", onePool + keys, "Bearer k-a", "", ""},
		{"known, spaces around", onePool + keys, "Bearer  k-a ", "", ""},
		{"known as X-Api-Key", onePool + keys, "", "", "k-a"},
		{"unknown as X-Api-Key", onePool + keys, "", "invalid_api_key", "k-b"},
		{"Authorization wins over X-Api-Key", onePool + keys, "Bearer k-b", "invalid_api_key", "k-a"},
	} {
		x := policyExchange(t, c.yaml, "{}", map[string]string{"Authorization": c.auth, "X-Api-Key": c.apiKey})
		r := authenticate{}.apply(x)
		switch {
		case c.code == "" && r != nil:
			t.Errorf("%s: refused %+v", c.name, r)
		case c.code != "" && (r == nil || r.code != c.code || r.status != 401):
			t.Errorf("%s: %+v, want 401 %s", c.name, r, c.code)
		case (c.name == "known" || c.name == "known as X-Api-Key") && (x.key == nil || x.key.cfg.Priority != 3):
			t.Errorf("%s: key %+v not attached", c.name, x.key)
		}
	}
}
