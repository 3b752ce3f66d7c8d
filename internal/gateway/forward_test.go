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

// fallbackGateway is a route whose pool times out (ttft) and falls back
// to a route of another pool.
func fallbackGateway(t *testing.T, big, small *openaitest.Upstream, smallQueue, smallRoute string) *Gateway {
	t.Helper()
	return mustGateway(t, fmt.Sprintf(`
pools:
  - {name: big, replicas: [{url: %q}]}
  - {name: small, replicas: [{url: %q}], queue: %s}
routes:
  - {model: big-model, pool: big, fallback: small-model, timeouts: {ttft: 300ms}}
  - {model: small-model, pool: small%s}
`, big.URL(), small.URL(), smallQueue, smallRoute))
}

// The pool that produced the first token is the one fed: its hedging
// delay (upstream TTFT) and its adaptive limit (upstream TTFT from the
// admission to that pool); the pool given up counts its TTFT timeout as
// a drop (overload) and is fed no first token.
func TestFallbackFeedsThePoolThatAnswered(t *testing.T) {
	big := openaitest.Start(t, &openaitest.Upstream{Name: "big", TTFT: time.Minute})
	small := openaitest.Start(t, &openaitest.Upstream{Name: "small"})
	g := fallbackGateway(t, big, small, "{}", "")
	gw := startGateway(t, g)
	if s, _, b := do(t, gw.URL, chatBody("big-model", true, "x", ""), nil); s != 200 {
		t.Fatalf("status %d: %s", s, b)
	}
	rt := g.rt.Load()
	bigP, smallP := rt.pools["big"], rt.pools["small"]
	bigFirst, bigDrops := bigP.adm.fed()
	smallFirst, smallDrops := smallP.adm.fed()
	if bigFirst != 0 || bigDrops != 1 || smallFirst != 1 || smallDrops != 0 {
		t.Errorf("adaptive limits fed: big %d first tokens, %d drops; small %d, %d; want big 0, 1 and small 1, 0",
			bigFirst, bigDrops, smallFirst, smallDrops)
	}
	if n := len(bigP.ttfts); n != 0 {
		t.Errorf("big pool's hedging samples: %d, want 0", n)
	}
	if n := len(smallP.ttfts); n != 1 || smallP.ttfts[0] > 250*time.Millisecond {
		t.Errorf("small pool's hedging samples: %v, want one, its own TTFT (not the big pool's 300 ms)", smallP.ttfts)
	}
}

// The fallback waits in its pool's queue with the request's deadline, and
// the fallback route's early rejection refuses it there when the deadline
// passes: 429 deadline, counted under the fallback's pool.
func TestFallbackQueueKeepsTheDeadline(t *testing.T) {
	big := openaitest.Start(t, &openaitest.Upstream{Name: "big", TTFT: time.Minute})
	gate := make(chan struct{})
	small := openaitest.Start(t, &openaitest.Upstream{Name: "small", Gate: gate, Chunks: 1})
	g := fallbackGateway(t, big, small, "{concurrency: 1}", ", early_reject: true")
	gw := startGateway(t, g)
	// Hold the small pool's only slot.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held := make(chan struct{})
	go func() { // answered once the gate opens
		defer close(held)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+chatPath, strings.NewReader(chatBody("small-model", true, "x", "")))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	waitFor(t, "small slot held", func() bool { _, inflight, _ := g.rt.Load().pools["small"].adm.snapshot(); return inflight == 1 })

	s, hdr, b := do(t, gw.URL, chatBody("big-model", true, "x", ""), map[string]string{headerDeadline: "800"})
	if s != 429 || hdr.Get("Retry-After") == "" || !strings.Contains(b, `"code":"deadline"`) {
		t.Fatalf("status %d %v body %s, want 429 deadline", s, hdr, b)
	}
	if n := testutil.ToFloat64(g.Metrics.Rejected.WithLabelValues("small", "deadline")); n != 1 {
		t.Errorf("rejected{small, deadline} = %v, want 1", n)
	}
	close(gate)
	<-held
}

// The fallback follows any failure the gateway retries (a TTFT timeout, a
// connection error, 5xx or 429 before the first token) once retries are
// spent; a failure it does not retry (a 400) is answered as it is.
func TestFallbackAfterRetryableFailures(t *testing.T) {
	for _, c := range []struct {
		status, want int
		smallServed  int64
	}{{http.StatusServiceUnavailable, 200, 1}, {http.StatusTooManyRequests, 200, 1}, {http.StatusBadRequest, 400, 0}} {
		big := openaitest.Start(t, &openaitest.Upstream{Name: "big", Status: c.status})
		small := openaitest.Start(t, &openaitest.Upstream{Name: "small"})
		gw := startGateway(t, fallbackGateway(t, big, small, "{}", ""))
		s, _, b := do(t, gw.URL, chatBody("big-model", true, "x", ""), nil)
		if s != c.want || small.Served.Load() != c.smallServed {
			t.Errorf("big answers %d: status %d (%s), small served %d; want %d and %d", c.status, s, b, small.Served.Load(), c.want, c.smallServed)
		}
	}
}

// The winning attempt is counted as won once per request, streamed or
// whole — after its first write (feedFirstToken), still before the
// request ends.
func TestWonAttemptCounted(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a"})
	g := quickGateway(t, up.URL())
	gw := startGateway(t, g)
	for i, stream := range []bool{true, false, true} {
		if s, _, b := do(t, gw.URL, chatBody("m", stream, "x", ""), nil); s != 200 {
			t.Fatalf("request %d: status %d: %s", i, s, b)
		}
		if got := testutil.ToFloat64(g.Metrics.Attempts.WithLabelValues("default", "won")); got != float64(i+1) {
			t.Errorf("after request %d: won %v, want %d", i, got, i+1)
		}
	}
}

// The attempts' pooled reading state (attemptBuf) serves one request
// after another whatever the last left in it: an event longer than the
// reader's initial buffer and the pool's bound on its data buffer, then
// short ones, each passed on whole, to its [DONE].
func TestPooledReaderAfterLongEvent(t *testing.T) {
	long := strings.Repeat("w", 3*maxPooledData)
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a", Words: []string{"short "}})
	longUp := openaitest.Start(t, &openaitest.Upstream{Name: "b", Words: []string{long, "end "}})
	g := mustGateway(t, fmt.Sprintf(`
pools:
  - {name: a, replicas: [{url: %q}]}
  - {name: b, replicas: [{url: %q}]}
routes:
  - {model: short, pool: a}
  - {model: long, pool: b}
`, up.URL(), longUp.URL()))
	gw := startGateway(t, g)
	for i, model := range []string{"short", "long", "short", "long", "short"} {
		s, _, b := do(t, gw.URL, chatBody(model, true, "x", ""), nil)
		if s != 200 {
			t.Fatalf("request %d: status %d: %s", i, s, b)
		}
		want := []string{`"short "`}
		if model == "long" {
			want = []string{`"` + long + `"`, `"end "`}
		}
		for _, w := range append(want, "data: [DONE]\n\n") {
			if !strings.Contains(b, w) {
				t.Errorf("request %d (%s): %d bytes without %.20q", i, model, len(b), w)
			}
		}
	}
}
