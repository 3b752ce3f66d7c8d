package bench

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// config.json and errors never carry the target's credentials: its API
// key, its URL's userinfo, credential headers.
func TestTargetCredentialsMasked(t *testing.T) {
	tg := Target{BaseURL: "http://ops:pw-secret-1@10.0.0.1:8000/v1", APIKey: "sk-secret-2",
		Headers: http.Header{"Authorization": {"Bearer tok-secret-3"}, "X-Api-Key": {"key-secret-4"},
			"X-Trace": {"keep-me"}, "X-Forward": {"http://u:pw-secret-5@proxy"}}}
	b, err := json.Marshal(redacted(tg))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"pw-secret-1", "sk-secret-2", "tok-secret-3", "key-secret-4", "pw-secret-5", "ops:"} {
		if strings.Contains(string(b), s) {
			t.Errorf("config.json target %s holds %q", b, s)
		}
	}
	if !strings.Contains(string(b), "keep-me") || !strings.Contains(string(b), "10.0.0.1:8000") {
		t.Errorf("config.json target %s lost what is not a credential", b)
	}
	if tg.Headers.Get("X-Api-Key") != "key-secret-4" {
		t.Error("redacted changed the target it was given")
	}
	for _, bad := range []string{"http://ops:pw-secret-1@10.0.0.1:%zz", "ftp://ops:pw-secret-1@host"} {
		_, err := Target{BaseURL: bad}.apiURL("/models")
		if err == nil || strings.Contains(err.Error(), "pw-secret-1") {
			t.Errorf("apiURL(%q) error %v", bad, err)
		}
	}
}
