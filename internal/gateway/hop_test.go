package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/tokentrace/tokentrace/internal/openaitest"
)

// hopUpstream answers with hop-by-hop headers: the standard ones and one
// named in its Connection header, plus an end-to-end header that must
// pass. It keeps the request headers it received.
func hopUpstream(t *testing.T) *openaitest.Upstream {
	t.Helper()
	return openaitest.Start(t, &openaitest.Upstream{Name: "hop", Header: http.Header{
		"Connection":         {"X-Internal-Secret, x-other-hop"},
		"X-Internal-Secret":  {"internal-value"},
		"X-Other-Hop":        {"other-value"},
		"Keep-Alive":         {"timeout=5"},
		"Proxy-Connection":   {"keep-alive"},
		"Proxy-Authenticate": {"Basic realm=x"},
		"Upgrade":            {"h2c"},
		"X-End-To-End":       {"kept"},
	}})
}

// TestHopByHopHeadersStripped: neither the standard hop-by-hop headers
// nor those a Connection header names cross the gateway, in either
// direction (RFC 9110 §7.6.1); end-to-end headers do.
func TestHopByHopHeadersStripped(t *testing.T) {
	up := hopUpstream(t)
	gw := startGateway(t, quickGateway(t, up.URL()))
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
			seen := up.Headers()
			upHeaders := seen[len(seen)-1]
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
