package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The engine's tokenizer endpoints outside /v1/ pass through the gateway
// (llama.cpp's /tokenize and /apply-template), so a client behind it
// sizes prompts against the engine's tokenizer; refused with the other
// unknown paths.
func TestEngineTokenizerPassesThrough(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/tokenize":
			_, _ = io.WriteString(w, `{"tokens":[1,2,3]}`)
		case "/apply-template":
			_, _ = io.WriteString(w, `{"prompt":"<user>hello"}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(up.Close)
	gw := startGateway(t, quickGateway(t, up.URL))
	for path, want := range map[string]string{"/tokenize": `"tokens":[1,2,3]`, "/apply-template": `"prompt"`} {
		resp := postJSON(t, gw.URL+path, `{"content":"hello world","add_special":true}`)
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), want) {
			t.Errorf("%s: %d %s", path, resp.StatusCode, b)
		}
	}
	resp := postJSON(t, gw.URL+"/tokenizer_config", `{}`)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("another root path: %d, want 404", resp.StatusCode)
	}
}
