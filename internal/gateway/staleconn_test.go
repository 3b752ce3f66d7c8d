package gateway

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/staleconn"
	"github.com/tokentrace/tokentrace/internal/staleconn/staleconntest"
)

// An upstream that reads a connection's second request and closes it
// unanswered (what a server closing after each answer does to the next
// request on a pooled connection): the gateway's transport resends it once
// on a fresh connection — each answered on the first attempt, no retry on
// another replica — and counts stale_connection, until it has learned the
// upstream (staleconn.DefaultLearnAfter stale connections in a row) and
// sends it fresh connections up front: 3 of the 10, not 5.
func TestUpstreamStaleConnectionResent(t *testing.T) {
	g := quickGateway(t, staleconntest.Start(t, staleconntest.DiscardSecond))
	gw := startGateway(t, g)
	for i := 0; i < 10; i++ {
		resp := post(t, context.Background(), gw.URL, chatBody("m", true, "hi", ""), nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "[DONE]") {
			t.Fatalf("request %d: status %d body %s", i, resp.StatusCode, b)
		}
	}
	if n := upstreamErrors(g, "default", faultStaleConn); n != staleconn.DefaultLearnAfter {
		t.Errorf("stale_connection %v, want %d (every second request on an upstream connection until learned)", n, staleconn.DefaultLearnAfter)
	}
}
