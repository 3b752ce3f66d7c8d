package app

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/openaitest"
)

// eventUpstream streams the given SSE body as a model server would.
func eventUpstream(t *testing.T, body string) *openaitest.Upstream {
	t.Helper()
	return openaitest.Start(t, &openaitest.Upstream{Script: body})
}

// askApp sends one chat request through an application (guardrail off)
// in front of upstream and returns the answer's text.
func askApp(t *testing.T, upstream string, stream bool) string {
	t.Helper()
	srv := newTestServer(t, upstream, func(c *Config) { c.Guardrail = GuardrailOff })
	body := `{"model":"m","messages":[{"role":"user","content":"count"}],"max_tokens":3,"stream":` + map[bool]string{true: "true", false: "false"}[stream] + `}`
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	return answerText(t, b, stream)
}

// TestUpstreamLineEnds: the application reads its upstream's stream with
// each line end SSE allows (LF, CRLF, a lone CR) alike, and answers its
// client with the same text.
func TestUpstreamLineEnds(t *testing.T) {
	for _, end := range []string{"\n", "\r\n", "\r"} {
		var body strings.Builder
		for i, wd := range []string{"one", " two", " three"} {
			b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"index": i, "delta": map[string]string{"content": wd}}}})
			body.WriteString("data: " + string(b) + end + end)
		}
		body.WriteString(`data: {"choices":[],"usage":{"prompt_tokens":30,"completion_tokens":3}}` + end + end + "data: [DONE]" + end + end)
		up := eventUpstream(t, body.String())
		for _, stream := range []bool{true, false} {
			if text := askApp(t, up.URL(), stream); text != "one two three" {
				t.Errorf("%q stream=%v: answer %q, want %q", end, stream, text, "one two three")
			}
		}
	}
}

// TestUpstreamChunkKeys: the application reads its upstream's chunks with
// the one chunk classifier: escapes in content are unescaped, and keys
// match exactly (a "Choices" or "Content" is another key, not output).
func TestUpstreamChunkKeys(t *testing.T) {
	body := `data: {"choices":[{"index":0,"delta":{"content":"caf\u00e9 \"q\""}}]}` + "\n\n" +
		`data: {"Choices":[{"index":0,"delta":{"content":" other"}}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{"Content":" case"}}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{"content":" end"},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"
	up := eventUpstream(t, body)
	for _, stream := range []bool{true, false} {
		if text, want := askApp(t, up.URL(), stream), `café "q" end`; text != want {
			t.Errorf("stream=%v: answer %q, want %q", stream, text, want)
		}
	}
}
