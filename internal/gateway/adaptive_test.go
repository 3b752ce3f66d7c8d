package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/openaitest"
)

func TestAdaptiveConfig(t *testing.T) {
	pool := func(queue string) string {
		return `pools: [{name: p, replicas: [{url: "http://h"}], queue: ` + queue + `}]`
	}
	for _, c := range []struct {
		name, queue string
		want        string // the controller in effect, or an error's text
		min, max    int
	}{
		{"fixed", `{concurrency: 4}`, "", 0, 0},
		{"gradient", `{concurrency: 4, adaptive: gradient}`, "gradient", 1, 16},
		{"aimd: true is gradient", `{concurrency: 4, aimd: true, min_concurrency: 2, max_concurrency: 6}`, "gradient", 2, 6},
		{"unknown controller", `{concurrency: 4, adaptive: aimd}`, `queue.adaptive is "aimd", want gradient`, 0, 0},
		{"no concurrency", `{adaptive: gradient}`, "needs queue.concurrency", 0, 0},
		{"initial outside bounds", `{concurrency: 4, adaptive: gradient, max_concurrency: 3}`, "min_concurrency ≤ concurrency ≤ max_concurrency", 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := ParseConfig([]byte(pool(c.queue)))
			if err != nil {
				if !strings.Contains(err.Error(), c.want) {
					t.Errorf("error %v, want one containing %q", err, c.want)
				}
				return
			}
			q := cfg.Pools[0].Queue
			if q.adaptive() != c.want || (c.want != "" && (q.MinConcurrency != c.min || q.MaxConcurrency != c.max)) {
				t.Errorf("controller %q in [%d, %d], want %q in [%d, %d]", q.adaptive(), q.MinConcurrency, q.MaxConcurrency, c.want, c.min, c.max)
			}
			if limitsOf(q).Adaptive != (c.want != "") {
				t.Errorf("route limits adaptive = %v, want %v", limitsOf(q).Adaptive, c.want != "")
			}
		})
	}
}

func TestOverloadStatus(t *testing.T) {
	for status, want := range map[int]bool{
		http.StatusTooManyRequests: true, http.StatusServiceUnavailable: true, http.StatusGatewayTimeout: true,
		http.StatusBadRequest: false, http.StatusInternalServerError: false, http.StatusBadGateway: false, statusClientClosed: false,
	} {
		if got := overloadStatus(status); got != want {
			t.Errorf("overloadStatus(%d) = %v, want %v", status, got, want)
		}
	}
}

// TestGatewayQueueTimeDoesNotShrinkLimit runs an adaptive pool whose
// upstream answers its first token after a steady 50 ms: first at half
// load (a window of samples without queueing anywhere), then with a burst
// that waits up to 1.35 s in the gateway's own queue. The controller
// must learn from the upstream's TTFT only: the limit stays at its maximum.
// Fed the TTFT from gateway arrival instead, the burst's window averages
// several times the first one's and the limit is cut.
func TestGatewayQueueTimeDoesNotShrinkLimit(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a", TTFT: 50 * time.Millisecond, Gap: 50 * time.Millisecond, Chunks: 3})
	g := mustGateway(t, fmt.Sprintf(`
pools: [{name: p, replicas: [{url: %q}], queue: {concurrency: 8, min_concurrency: 1, max_concurrency: 8, adaptive: gradient}}]
routes: [{model: "*", pool: p}]
`, up.URL()))
	gw := startGateway(t, g)
	run := func(clients, each int) {
		var wg sync.WaitGroup
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					if s, _, b := do(t, gw.URL, chatBody("m", true, "x", ""), nil); s != 200 {
						t.Errorf("status %d: %s", s, b)
					}
				}
			}()
		}
		wg.Wait()
	}
	// Each request holds its slot ≈ 150 ms: 4 clients × 8 requests span
	// ≈ 1.2 s with 4 in flight (half the limit: the controller learns).
	run(4, 8)
	// 80 at once: 10 rounds of 8 over ≈ 1.5 s (a full window), the last
	// waiting ≈ 1.35 s in the gateway's queue.
	run(80, 1)
	if d, f, l := poolState(g, "p"); d != 0 || f != 0 || l != 8 {
		t.Errorf("after the burst: depth %d, in flight %d, limit %v; want 0, 0, 8 (the gateway's queue is not upstream load)", d, f, l)
	}
}

// TestAdaptiveHoldsUpstreamAtCapacity overloads tokentrace serve (8
// sequences per batch, 10 ms steps, 16-token answers: capacity ≈ 8 / (17 ×
// 10 ms) ≈ 47 req/s) at about 2.5× through an adaptive pool with a bounded
// queue, and checks that the gateway keeps the upstream busy: the limit
// and the requests in flight stay near the upstream's 8 sequences instead
// of collapsing (the controller once counted the gateway's own queue wait
// as upstream latency and shrank the limit to its minimum), and the limit
// does not run away into the upstream's queue either.
func TestAdaptiveHoldsUpstreamAtCapacity(t *testing.T) {
	if testing.Short() {
		t.Skip("overload run: a few seconds")
	}
	s := startServeSeqs(t, 10*time.Millisecond, 8)
	g := mustGateway(t, fmt.Sprintf(`
pools: [{name: sim, replicas: [{url: %q, kind: tokentrace}], queue: {concurrency: 8, min_concurrency: 1, max_concurrency: 32, adaptive: gradient, max_size: 16}}]
routes: [{model: "*", pool: sim}]
`, serveBase(s)))
	gw := startGateway(t, g)
	var (
		mu             sync.Mutex
		samples        int
		sumInflight    int
		minLim, maxLim = 1e9, 0.0
	)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		warm := time.Now().Add(time.Second) // the first second fills the queue
		for {
			select {
			case <-stop:
				return
			case now := <-tk.C:
				if now.Before(warm) {
					continue
				}
				_, f, l := poolState(g, "sim")
				mu.Lock()
				samples++
				sumInflight += f
				minLim, maxLim = min(minLim, l), max(maxLim, l)
				mu.Unlock()
			}
		}
	}()
	_, ok, _, n, _ := overloadRun(benchClient(), gw.URL, 120, 4*time.Second, time.Hour)
	close(stop)
	<-sampled
	mean := float64(sumInflight) / float64(samples)
	t.Logf("%d of %d answered; mean in flight %.1f, limit within [%.1f, %.1f] (%d samples)", ok, n, mean, minLim, maxLim, samples)
	if mean < 6 || minLim < 6 {
		t.Errorf("mean in flight %.1f, lowest limit %.1f: want both ≥ 6 (the upstream runs 8 sequences)", mean, minLim)
	}
	if maxLim > 16 {
		t.Errorf("highest limit %.1f: want ≤ 16 (beyond 8 the requests only queue upstream)", maxLim)
	}
}
