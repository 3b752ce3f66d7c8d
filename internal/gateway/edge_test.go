package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// scriptedUpstream answers every completion with the given SSE body,
// written in one go.
func scriptedUpstream(t testing.TB, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

const (
	roleChunk  = `data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n"
	stopChunk  = `data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n"
	usageChunk = `data: {"id":"x","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":0,"total_tokens":3}}` + "\n\n"
	textChunk  = `data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}` + "\n\n"
	doneEvent  = "data: [DONE]\n\n"
)

// TestStreamEdgeShapesEndWithOneDone: whatever the upstream's valid
// stream holds (no content at all, usage only, [DONE] alone), the client
// gets its events, one server-timing comment, and exactly one [DONE],
// last.
func TestStreamEdgeShapesEndWithOneDone(t *testing.T) {
	for _, c := range []struct{ name, body string }{
		{"role and stop, no content", roleChunk + stopChunk + doneEvent},
		{"usage only", roleChunk + stopChunk + usageChunk + doneEvent},
		{"[DONE] alone", doneEvent},
		{"CRLF line ends", strings.ReplaceAll(roleChunk+stopChunk+doneEvent, "\n", "\r\n")},
		{"content", roleChunk + textChunk + stopChunk + doneEvent},
	} {
		t.Run(c.name, func(t *testing.T) {
			gw := startGateway(t, quickGateway(t, scriptedUpstream(t, c.body)))
			resp := post(t, context.Background(), gw.URL, chatBody("m", true, "x", ""), nil)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			data, comments := sseEvents(t, strings.NewReader(string(b)))
			if n := strings.Count(string(b), "[DONE]"); n != 1 || len(data) == 0 || data[len(data)-1] != "[DONE]" {
				t.Errorf("%d [DONE]s, want one, last:\n%s", n, b)
			}
			if len(comments) != 1 || !strings.HasPrefix(comments[0], "server-timing ") {
				t.Errorf("comments %q, want one server-timing comment", comments)
			}
			if want := strings.Count(c.body, "data: {"); len(data)-1 != want {
				t.Errorf("%d events before [DONE], want the upstream's %d:\n%s", len(data)-1, want, b)
			}
			if resp.Trailer.Get("Server-Timing") == "" {
				t.Error("no Server-Timing trailer")
			}
		})
	}
}

// TestStreamWithOnlyAnErrorEvent: an upstream whose stream holds an error
// event before any content is answered as an error (the upstream's, with
// 502), not as a stream; no [DONE].
func TestStreamWithOnlyAnErrorEvent(t *testing.T) {
	body := roleChunk + `data: {"error":{"message":"model overloaded","type":"server_error","code":"overloaded"}}` + "\n\n" + doneEvent
	gw := startGateway(t, quickGateway(t, scriptedUpstream(t, body)))
	resp := post(t, context.Background(), gw.URL, chatBody("m", true, "x", ""), nil)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), "model overloaded") || strings.Contains(string(b), "[DONE]") {
		t.Fatalf("status %d body %s, want 502 with the upstream's error and no [DONE]", resp.StatusCode, b)
	}
}
