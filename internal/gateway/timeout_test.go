package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tokentrace/tokentrace/internal/openaitest"
)

// silentUpstream sends the response headers and first, then only
// keep-alive comments, every 5 ms, until the request ends.
func silentUpstream(t testing.TB, first string) string {
	t.Helper()
	return openaitest.Start(t, &openaitest.Upstream{Script: first, Hold: true, KeepAlive: 5 * time.Millisecond}).URL()
}

// TestTimeoutDefaults: with nothing configured the first-token and idle
// timeouts are on, at their documented defaults; 0 turns each off; a
// value replaces it. Routes the gateway makes itself (quick start,
// replica-listed models) get the defaults too.
func TestTimeoutDefaults(t *testing.T) {
	for _, c := range []struct {
		timeouts   string
		ttft, idle time.Duration
	}{
		{"", DefaultTTFTTimeout, DefaultIdleTimeout},
		{"timeouts: {retries: 1}", DefaultTTFTTimeout, DefaultIdleTimeout},
		{"timeouts: {ttft: 0, idle: 0}", 0, 0},
		{"timeouts: {ttft: 3s}", 3 * time.Second, DefaultIdleTimeout},
		{"timeouts: {idle: 250ms}", DefaultTTFTTimeout, 250 * time.Millisecond},
	} {
		cfg, err := ParseConfig([]byte(fmt.Sprintf("pools: [{name: p, replicas: [{url: \"http://h:1\", models: [listed]}]}]\nroutes: [{model: m, pool: p, %s}]\n", c.timeouts)))
		if err != nil {
			t.Fatalf("%q: %v", c.timeouts, err)
		}
		if got := cfg.Routes[0].Timeouts; got.ttft() != c.ttft || got.idle() != c.idle {
			t.Errorf("%q: ttft %v idle %v, want %v %v", c.timeouts, got.ttft(), got.idle(), c.ttft, c.idle)
		}
		g, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		g.Close()
		if r := g.rt.Load().route("listed"); r.Timeouts.ttft() != DefaultTTFTTimeout || r.Timeouts.idle() != DefaultIdleTimeout {
			t.Errorf("a replica-listed model's route: ttft %v idle %v, want the defaults", r.Timeouts.ttft(), r.Timeouts.idle())
		}
	}
	if DefaultTTFTTimeout < time.Minute || DefaultIdleTimeout < 30*time.Second {
		t.Errorf("defaults %v, %v are not generous", DefaultTTFTTimeout, DefaultIdleTimeout)
	}
	q, err := QuickConfig([]string{"http://h:1"})
	if err != nil {
		t.Fatal(err)
	}
	if tt := q.Routes[0].Timeouts; tt.ttft() != DefaultTTFTTimeout || tt.idle() != DefaultIdleTimeout {
		t.Errorf("quick start: ttft %v idle %v, want the defaults", tt.ttft(), tt.idle())
	}
}

// TestSilentUpstreamBeforeFirstToken: headers then only keep-alive
// comments: the first-token timeout answers 504 (comments are not tokens).
func TestSilentUpstreamBeforeFirstToken(t *testing.T) {
	up := silentUpstream(t, roleChunk)
	gw := startGateway(t, mustGateway(t, "pools: [{name: p, replicas: [{url: "+up+"}]}]\nroutes: [{model: \"*\", pool: p, timeouts: {ttft: 100ms}}]\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp := post(t, ctx, gw.URL, chatBody("m", true, "x", ""), nil)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(b), "ttft_timeout") {
		t.Fatalf("status %d body %s, want 504 ttft_timeout", resp.StatusCode, b)
	}
}

// TestSilentUpstreamAfterFirstToken: a first token, then only keep-alive
// comments: the idle timeout ends the client's stream with an
// idle_timeout error event, counted as a 504 and an upstream fault, and
// cancels the upstream.
func TestSilentUpstreamAfterFirstToken(t *testing.T) {
	up := silentUpstream(t, roleChunk+textChunk)
	g := mustGateway(t, "pools: [{name: p, replicas: [{url: "+up+"}]}]\nroutes: [{model: \"*\", pool: p, timeouts: {idle: 100ms}}]\n")
	gw := startGateway(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp := post(t, ctx, gw.URL, chatBody("m", true, "x", ""), nil)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("the stream did not end: %v", err)
	}
	data, comments := sseEvents(t, strings.NewReader(string(b)))
	if len(data) != 3 || !strings.Contains(data[2], `"code":"idle_timeout"`) || strings.Contains(string(b), "[DONE]") {
		t.Fatalf("events %q, want role, content, then an idle_timeout error event", data)
	}
	if len(comments) == 0 {
		t.Error("the upstream's keep-alive comments were not passed on")
	}
	if n := upstreamErrors(g, "p", "idle_timeout"); n != 1 {
		t.Errorf("upstream_errors_total{kind=idle_timeout} = %v, want 1", n)
	}
	waitFor(t, "the request to be counted as a 504", func() bool {
		return testutil.ToFloat64(g.Metrics.Requests.WithLabelValues("p", "*", "504")) == 1
	})
}
