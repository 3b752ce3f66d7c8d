package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// hopUpstream answers with hop-by-hop headers: the standard ones and one
// named in its Connection header, plus an end-to-end header that must
// pass. It records the request headers it received.
func hopUpstream(t *testing.T, got chan<- http.Header) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		h := w.Header()
		h.Add("Connection", "X-Internal-Secret, x-other-hop")
		h.Set("X-Internal-Secret", "internal-value")
		h.Set("X-Other-Hop", "other-value")
		h.Set("Keep-Alive", "timeout=5")
		h.Set("Proxy-Connection", "keep-alive")
		h.Set("Proxy-Authenticate", "Basic realm=x")
		h.Set("Upgrade", "h2c")
		h.Set("X-End-To-End", "kept")
		body, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(body), `"stream":true`) {
			h.Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"choices":[{"message":{"content":"hi"}}],"usage":{"completion_tokens":1}}`)
			return
		}
		h.Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestHopByHopHeadersStripped: neither the standard hop-by-hop headers
// nor those a Connection header names cross the gateway, in either
// direction (RFC 9110 §7.6.1); end-to-end headers do.
func TestHopByHopHeadersStripped(t *testing.T) {
	got := make(chan http.Header, 4)
	up := hopUpstream(t, got)
	gw := startGateway(t, quickGateway(t, up.URL))
	hop := []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Upgrade", "Te", "Trailer",
		"X-Internal-Secret", "X-Other-Hop", "X-Client-Hop"}
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			resp := post(t, context.Background(), gw.URL, chatBody("m", stream, "x", ""), map[string]string{
				"Connection": "X-Client-Hop", "X-Client-Hop": "client-hop", "Keep-Alive": "timeout=5", "Proxy-Connection": "keep-alive",
				"Proxy-Authorization": "Basic cHJveHk6cHc=", "Te": "trailers", "X-End-To-End": "kept"})
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			upHeaders := <-got
			for _, k := range hop {
				if v := resp.Header.Values(k); len(v) > 0 {
					t.Errorf("client received hop-by-hop %s: %q", k, v)
				}
				if v := upHeaders.Values(k); len(v) > 0 {
					t.Errorf("upstream received hop-by-hop %s: %q", k, v)
				}
			}
			if resp.Header.Get("X-End-To-End") != "kept" || upHeaders.Get("X-End-To-End") != "kept" {
				t.Errorf("an end-to-end header was dropped: client %q, upstream %q", resp.Header.Get("X-End-To-End"), upHeaders.Get("X-End-To-End"))
			}
		})
	}
}
