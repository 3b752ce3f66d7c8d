package bench

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tokentrace/tokentrace/internal/latency"
)

// TestWholeAnswers: a non-streaming answer is read with the stream's
// chunk classifier: keys match exactly (a "Choices" or "Usage" is another
// key), a body that is not a JSON object of the expected shape is an
// invalid event, and an error object is the server's error.
func TestWholeAnswers(t *testing.T) {
	type got struct {
		OK                    bool
		Kind                  latency.ErrorKind
		Finish                string
		Output, Input, Cached int
		OutputSource          string
	}
	tests := []struct {
		name, body string
		want       got
		text       string // in the record's error
	}{
		{"chat", `{"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1}}}`,
			got{OK: true, Finish: "stop", Output: 2, Input: 3, Cached: 1, OutputSource: latency.SourceUsage}, ""},
		{"completion without usage", `{"choices":[{"index":0,"text":"hi","finish_reason":"length"}]}`,
			got{OK: true, Finish: "length", Output: 1, Input: 3, OutputSource: latency.SourceChunks}, ""},
		{"usage key in another case", `{"choices":[{"index":0,"message":{"content":"hi"},"finish_reason":"stop"}],"Usage":{"prompt_tokens":3,"completion_tokens":2}}`,
			got{OK: true, Finish: "stop", Output: 1, Input: 3, OutputSource: latency.SourceChunks}, ""},
		{"choices key in another case", `{"Choices":[{"index":0,"message":{"content":"hi"}}]}`,
			got{Kind: latency.FailInvalidEvent}, "no choices"},
		{"not JSON", `<html>maintenance</html>`, got{Kind: latency.FailInvalidEvent}, "not valid JSON"},
		{"wrong shape", `{"choices":{"index":0}}`, got{Kind: latency.FailInvalidEvent}, "expected shape"},
		{"error", `{"error":{"message":"boom","type":"server_error"}}`, got{Kind: latency.FailServer}, "server_error: boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			rec := do(t, newTestClient(t, srv.URL, func(tg *Target) { tg.Stream = false }))
			g := got{rec.OK(), rec.ErrorKind, rec.FinishReason, rec.OutputTokens, rec.InputTokens, rec.CachedTokens, rec.OutputSource}
			if !g.OK {
				g.Output, g.Input = 0, 0
			}
			if diff := cmp.Diff(tt.want, g); diff != "" {
				t.Errorf("record (-want +got):\n%s", diff)
			}
			if !strings.Contains(rec.Error, tt.text) {
				t.Errorf("error %q, want it to contain %q", rec.Error, tt.text)
			}
		})
	}
}

// TestNoContentNoTTFT: an answer without content (a stream of role-only,
// finish and usage chunks, or a whole answer with empty content) has no
// first token, so its record has no TTFT; one with content has.
func TestNoContentNoTTFT(t *testing.T) {
	role := `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n"
	stop := `data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n"
	tests := []struct {
		name   string
		stream bool
		body   string
		ttft   bool
	}{
		{"stream: role, finish, usage", true, role + stop + `data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":0}}` + "\n\ndata: [DONE]\n\n", false},
		{"stream: role, finish", true, role + stop + "data: [DONE]\n\n", false},
		{"stream: content", true, role + `data: {"choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n" + stop + "data: [DONE]\n\n", true},
		{"whole: empty content, no usage", false, `{"choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"stop"}]}`, false},
		{"whole: empty content, usage", false, `{"choices":[{"index":0,"message":{"content":""},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":0}}`, false},
		{"whole: content, no usage", false, `{"choices":[{"index":0,"message":{"content":"a"},"finish_reason":"stop"}]}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				if tt.stream {
					w.Header().Set("Content-Type", "text/event-stream")
				}
				_, _ = io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			rec := do(t, newTestClient(t, srv.URL, func(tg *Target) { tg.Stream = tt.stream }))
			if !rec.OK() {
				t.Fatalf("failed: %s %s", rec.ErrorKind, rec.Error)
			}
			if _, ok := rec.TTFT(); ok != tt.ttft || (len(rec.ChunkNS) > 0) != tt.ttft {
				t.Errorf("TTFT defined %v with %d content chunks (output %d tokens), want %v", ok, len(rec.ChunkNS), rec.OutputTokens, tt.ttft)
			}
		})
	}
}
