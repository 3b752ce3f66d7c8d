package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/openaitest"
	"github.com/tokentrace/tokentrace/internal/redisstate/redistest"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// gatewayReplicas builds n gateways from one configuration, as n
// replicas of a Deployment would run, each serving on its own port, with
// their logs in one buffer.
func gatewayReplicas(t *testing.T, n int, yamlText string) ([]*Gateway, []*httptest.Server, *lockedBuffer) {
	t.Helper()
	logs := &lockedBuffer{}
	var gs []*Gateway
	var srvs []*httptest.Server
	for range n {
		cfg, err := ParseConfig([]byte(yamlText))
		if err != nil {
			t.Fatal(err)
		}
		g, err := newWithLog(cfg, slog.New(slog.NewTextHandler(logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, g)
		srvs = append(srvs, startGateway(t, g))
	}
	return gs, srvs, logs
}

// TestRedisLimiterMatchesLocal runs the Redis buckets and the in-process
// ones side by side on one random sequence of instants, sizes and
// settlements (each allowed request settled with a random use): every
// decision, wait and quota agrees (to the microsecond Redis counts in).
func TestRedisLimiterMatchesLocal(t *testing.T) {
	srv := redistest.Start(t)
	k := KeyConfig{Name: "k", SHA256: HashKey("k"), RequestsPerSecond: 3, Burst: 4, TokensPerMinute: 3000}
	g := mustGateway(t, fmt.Sprintf("pools: [{name: p, replicas: [{url: \"http://h\"}]}]\nredis: {url: %q, timeout: 5s}\n", srv.URL()))
	defer g.Close()
	remote := g.newRedisLimiter(g.rt.Load().redis, k).(*redisLimiter)
	remote.atNow = true
	local := NewLocalLimiter(k)
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Unix(1_800_000_000, 0)
	near := cmp.Comparer(func(a, b time.Duration) bool { return (a - b).Abs() <= 2*time.Microsecond })
	allowed := 0
	for i := range 400 {
		now = now.Add(time.Duration(rng.IntN(400_000)) * time.Microsecond)
		tokens := rng.IntN(700)
		want := local.Allow(context.Background(), now, tokens)
		got := remote.Allow(context.Background(), now, tokens)
		if diff := cmp.Diff(want, got, near); diff != "" {
			t.Fatalf("step %d (+%d tokens): in-process vs Redis (-want +got):\n%s", i, tokens, diff)
		}
		if got.Allowed {
			allowed++
			// Settled with what it used: less (given back) or more (owed,
			// down to −capacity) than it was charged.
			used := rng.IntN(2*tokens + 2)
			local.(TokenSettler).Settle(context.Background(), now, tokens, used)
			remote.Settle(context.Background(), now, tokens, used)
		}
	}
	if allowed < 50 || allowed > 350 {
		t.Errorf("%d of 400 allowed: the sequence does not exercise both answers", allowed)
	}
}

// TestTwoReplicasShareOneLimit sends one key's requests to two gateway
// replicas at once: with redis the key's limit holds across both, exactly
// (5 requests of a burst of 5; the token bucket's 4 requests of 250); with
// each replica's own buckets each lets its own burst through.
func TestTwoReplicasShareOneLimit(t *testing.T) {
	srv := redistest.Start(t)
	// A request's tokens: the gateway's estimate of "hi" with its role,
	// plus max_tokens.
	body := chatBody("m", false, "hi", `,"max_tokens":248`)
	req, err := ScanRequest([]byte(body), openai.APIChat, 512)
	if err != nil {
		t.Fatal(err)
	}
	perReq := req.InputTokens() + req.MaxTokens
	// Each answer uses its max_tokens and reports the estimate as its
	// prompt_tokens: the settlement gives back and takes nothing, whichever
	// answers end before the last admissions.
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a", Chunks: 248, PromptTokens: req.InputTokens()})
	keys := fmt.Sprintf("keys: [{name: req, sha256: %s, requests_per_second: 0.001, burst: 5}, {name: tok, sha256: %s, tokens_per_minute: 1000}]\n",
		HashKey("key-req"), HashKey("key-tok"))
	base := fmt.Sprintf("pools: [{name: p, replicas: [{url: %q}]}]\nroutes: [{model: \"*\", pool: p}]\n", up.URL()) + keys
	for _, tc := range []struct {
		name             string
		redis            string
		wantReq, wantTok int
	}{
		{"redis", fmt.Sprintf("redis: {url: %q, timeout: 5s}\n", srv.URL()), 5, 1000 / perReq},
		{"in-process", "", 2 * 5, 2 * (1000 / perReq)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, gws, _ := gatewayReplicas(t, 2, base+tc.redis)
			start := time.Now()
			count := func(key string) int {
				var mu sync.Mutex
				ok := 0
				var wg sync.WaitGroup
				for i := range 24 {
					wg.Go(func() {
						s, _, b := do(t, gws[i%2].URL, body, map[string]string{"Authorization": "Bearer " + key})
						switch s {
						case 200:
							mu.Lock()
							ok++
							mu.Unlock()
						case 429:
						default:
							t.Errorf("%s: %d %s", key, s, b)
						}
					})
				}
				wg.Wait()
				return ok
			}
			gotReq, gotTok := count("key-req"), count("key-tok")
			// The token bucket refills one request's worth every 60 ×
			// perReq / 1000 s; past that the count cannot be exact.
			if el := time.Since(start); el > time.Duration(60*perReq/1000)*time.Second {
				t.Fatalf("the requests took %s, longer than a refill: the counts cannot be exact", el)
			}
			if gotReq != tc.wantReq || gotTok != tc.wantTok {
				t.Errorf("allowed %d (requests bucket) and %d (tokens bucket, %d tokens each) of 24; want %d and %d",
					gotReq, gotTok, perReq, tc.wantReq, tc.wantTok)
			}
		})
	}
}

// TestRedisTokenLimitSettles: with redis a key's token charge is
// settled with the answer's usage as with the in-process buckets (#44):
// the unused part of max_tokens given back, and what an answer used
// beyond its charge owed. Each answer uses 600 tokens; the key has 1,000
// a minute (16.7 a second: each step's margin is ~300 tokens, 18 s of
// refill).
func TestRedisTokenLimitSettles(t *testing.T) {
	srv := redistest.Start(t)
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a", Chunks: 600})
	g := mustGateway(t, fmt.Sprintf("pools: [{name: p, replicas: [{url: %q}]}]\nroutes: [{model: \"*\", pool: p}]\nredis: {url: %q, timeout: 5s}\nkeys: [{name: k, sha256: %s, tokens_per_minute: 1000}]\n",
		up.URL(), srv.URL(), HashKey("k-tok")))
	defer g.Close()
	gw := startGateway(t, g)
	auth := map[string]string{"Authorization": "Bearer k-tok"}
	for i, s := range []struct {
		extra string
		want  int
		why   string
	}{
		{`,"max_tokens":990`, 200, "a full bucket"},
		{`,"max_tokens":300`, 200, "the first gave back the 390 it did not use"},
		{``, 429, "the second owes the 300 it used beyond its max_tokens"},
	} {
		st, _, b := do(t, gw.URL, chatBody("m", false, "hi", s.extra), auth)
		if st != s.want {
			t.Fatalf("step %d (%s): status %d, want %d (%s): %s", i, s.extra, st, s.want, s.why, b)
		}
	}
}

// TestRedisUnreachable kills Redis under a running gateway: with
// fail_open the key's requests pass unchecked, with fail_closed they get
// 503 in the OpenAI error shape; both are counted, Redis' failure is
// logged once (without its password) and its recovery once, and limits
// hold again once it is back.
func TestRedisUnreachable(t *testing.T) {
	const password = "redis-Secret-42"
	for _, onError := range []string{FailOpen, FailClosed} {
		t.Run(onError, func(t *testing.T) {
			srv := redistest.StartWithPassword(t, password)
			up := openaitest.Start(t, &openaitest.Upstream{Name: "a"})
			gs, gws, logs := gatewayReplicas(t, 1, fmt.Sprintf(`
pools: [{name: p, replicas: [{url: %q}]}]
routes: [{model: "*", pool: p}]
keys: [{name: k, sha256: %s, requests_per_second: 0.001, burst: 2}]
redis: {url: %q, timeout: 2s, retry_interval: 300ms, on_error: %s}
`, up.URL(), HashKey("the-key"), srv.URL(), onError))
			g, url := gs[0], gws[0].URL
			auth := map[string]string{"Authorization": "Bearer the-key"}
			body := chatBody("m", false, "hi", "")
			if s, h, b := do(t, url, body, auth); s != 200 || h.Get("X-Ratelimit-Remaining-Requests") != "1" {
				t.Fatalf("with redis: %d %v %s", s, h, b)
			}
			srv.Kill()
			for i := range 3 { // the first fails on the connection, the others within the retry interval
				s, h, b := do(t, url, body, auth)
				switch onError {
				case FailOpen:
					if s != 200 || h.Get("X-Ratelimit-Limit-Requests") != "" {
						t.Fatalf("request %d, redis down, fail_open: %d %v %s", i, s, h, b)
					}
				case FailClosed:
					var e struct {
						Error struct{ Message, Type, Code string }
					}
					if err := json.Unmarshal([]byte(b), &e); s != 503 || err != nil || e.Error.Code != "limits_unavailable" || e.Error.Type != "server_error" || h.Get("Retry-After") != "1" {
						t.Fatalf("request %d, redis down, fail_closed: %d %v %s", i, s, h, b)
					}
				}
			}
			decision := map[string]string{FailOpen: "allowed", FailClosed: "refused"}[onError]
			if v := testutil.ToFloat64(g.Metrics.RedisFallback.WithLabelValues(useLimits, decision)); v != 3 {
				t.Errorf("fallback %s = %v, want 3", decision, v)
			}
			if v := testutil.ToFloat64(g.Metrics.RedisErrors.WithLabelValues(useLimits)); v != 1 {
				t.Errorf("errors = %v, want 1 (the calls within the retry interval do not reach redis)", v)
			}
			if v := testutil.ToFloat64(g.Metrics.RedisUp.WithLabelValues()); v != 0 {
				t.Errorf("redis_up = %v while down", v)
			}
			if onError == FailClosed {
				if v := testutil.ToFloat64(g.Metrics.Rejected.WithLabelValues("p", "limits_unavailable")); v != 3 {
					t.Errorf("rejected limits_unavailable = %v, want 3", v)
				}
			}
			srv.Restart() // empty: the key's bucket is full again
			time.Sleep(400 * time.Millisecond)
			for _, want := range []string{"1", "0"} {
				if s, h, b := do(t, url, body, auth); s != 200 || h.Get("X-Ratelimit-Remaining-Requests") != want {
					t.Fatalf("redis back: %d %v %s (want %s remaining)", s, h, b, want)
				}
			}
			if s, _, b := do(t, url, body, auth); s != 429 {
				t.Fatalf("redis back, burst spent: %d %s", s, b)
			}
			out := logs.String()
			if strings.Count(out, "redis unreachable") != 1 || strings.Count(out, "redis reachable again") != 1 {
				t.Errorf("want one warning and one recovery line, got:\n%s", out)
			}
			if strings.Contains(out, password) {
				t.Errorf("the log quotes redis' password:\n%s", out)
			}
		})
	}
}

// heldUpstream answers each completion only when the test releases it,
// and tells the test of each arrival with the body's "user" (which
// gateway replica sent it).
type heldUpstream struct {
	arrived chan string
	release chan struct{}
	mu      sync.Mutex
	active  int
	peak    int
}

func newHeldUpstream(t *testing.T) (*heldUpstream, string) {
	h := &heldUpstream{arrived: make(chan string, 100), release: make(chan struct{}, 100)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b struct{ User string }
		_ = json.NewDecoder(r.Body).Decode(&b)
		h.mu.Lock()
		h.active++
		h.peak = max(h.peak, h.active)
		h.mu.Unlock()
		h.arrived <- b.User
		select {
		case <-h.release:
		case <-r.Context().Done():
		}
		h.mu.Lock()
		h.active--
		h.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	t.Cleanup(srv.Close)
	return h, srv.URL
}

func (h *heldUpstream) peakActive() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.peak
}

// TestSharedQueueHoldsAcrossReplicas sends 6 requests through each of two
// gateway replicas to a pool of concurrency 3. With queue.shared at most
// 3 reach the upstream at any time, freed slots alternate between the
// replicas, and all 12 finish; without it each replica admits its own 3.
func TestSharedQueueHoldsAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	for _, shared := range []bool{true, false} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			up, upURL := newHeldUpstream(t)
			gs, gws, _ := gatewayReplicas(t, 2, fmt.Sprintf(`
pools: [{name: p, replicas: [{url: %q}], queue: {concurrency: 3, shared: %v}}]
routes: [{model: "*", pool: p}]
redis: {url: %q, timeout: 5s, key_prefix: "t%v:"}
`, upURL, shared, srv.URL(), shared))
			var wg sync.WaitGroup
			codes := make(chan int, 12)
			for i := range 12 {
				wg.Go(func() {
					who := fmt.Sprintf("g%d", i%2)
					s, _, _ := do(t, gws[i%2].URL, chatBody("m", false, "hi", `,"user":"`+who+`"`), nil)
					codes <- s
				})
			}
			first := 3
			if !shared {
				first = 6
			}
			admitted := map[string]int{}
			for range first {
				select {
				case who := <-up.arrived:
					admitted[who]++
				case <-time.After(20 * time.Second):
					t.Fatalf("only %v reached the upstream", admitted)
				}
			}
			select { // nothing more while every slot is held
			case who := <-up.arrived:
				t.Fatalf("a request from %s reached the upstream past the limit (%v already)", who, admitted)
			case <-time.After(300 * time.Millisecond):
			}
			if !shared {
				if admitted["g0"] != 3 || admitted["g1"] != 3 {
					t.Errorf("without sharing: %v, want 3 from each replica", admitted)
				}
				for range 12 {
					up.release <- struct{}{}
				}
				wg.Wait()
				return
			}
			// Release one at a time: each frees exactly one slot.
			var order []string
			for range 12 - first {
				up.release <- struct{}{}
				select {
				case who := <-up.arrived:
					order = append(order, who)
				case <-time.After(20 * time.Second):
					t.Fatalf("a freed slot was not taken (order so far %v)", order)
				}
			}
			for range first {
				up.release <- struct{}{}
			}
			wg.Wait()
			close(codes)
			for s := range codes {
				if s != 200 {
					t.Errorf("status %d", s)
				}
			}
			if p := up.peakActive(); p != 3 {
				t.Errorf("peak in flight at the upstream %d, want 3", p)
			}
			// Once both replicas wait, freed slots go to them in turn: no
			// replica takes two in a row while the other still waits.
			left := map[string]int{"g0": 6 - admitted["g0"], "g1": 6 - admitted["g1"]}
			for i, who := range order {
				left[who]--
				if i > 0 && order[i-1] == who && left[otherReplica(who)] > 0 {
					t.Errorf("%s took two freed slots in a row while the other waited: %v (first 3: %v)", who, order, admitted)
					break
				}
			}
			if v := testutil.ToFloat64(gs[0].Metrics.SharedInUse.WithLabelValues("p")); v < 0 || v > 3 {
				t.Errorf("shared in flight gauge %v", v)
			}
		})
	}
}

func otherReplica(who string) string {
	if who == "g0" {
		return "g1"
	}
	return "g0"
}

// TestSharedQueueRedisUnreachable kills Redis under a shared pool: with
// fail_open requests are admitted under the replica's own limit, with
// fail_closed they are refused with 503 (queued ones included); both are
// counted, and the pool is shared again once Redis is back.
func TestSharedQueueRedisUnreachable(t *testing.T) {
	for _, onError := range []string{FailOpen, FailClosed} {
		t.Run(onError, func(t *testing.T) {
			srv := redistest.Start(t)
			up := openaitest.Start(t, &openaitest.Upstream{Name: "a"})
			gs, gws, logs := gatewayReplicas(t, 1, fmt.Sprintf(`
pools: [{name: p, replicas: [{url: %q}], queue: {concurrency: 2, shared: true}}]
routes: [{model: "*", pool: p}]
redis: {url: %q, timeout: 2s, retry_interval: 300ms, on_error: %s}
`, up.URL(), srv.URL(), onError))
			g, url := gs[0], gws[0].URL
			body := chatBody("m", false, "hi", "")
			if s, _, b := do(t, url, body, nil); s != 200 {
				t.Fatalf("with redis: %d %s", s, b)
			}
			srv.Kill()
			for i := range 3 {
				s, h, b := do(t, url, body, nil)
				switch onError {
				case FailOpen:
					if s != 200 {
						t.Fatalf("request %d, redis down, fail_open: %d %s", i, s, b)
					}
				case FailClosed:
					var e struct{ Error struct{ Type, Code string } }
					if err := json.Unmarshal([]byte(b), &e); s != 503 || err != nil || e.Error.Code != "admission_unavailable" || e.Error.Type != "server_error" || h.Get("Retry-After") != "1" {
						t.Fatalf("request %d, redis down, fail_closed: %d %v %s", i, s, h, b)
					}
				}
			}
			decision := map[string]string{FailOpen: "allowed", FailClosed: "refused"}[onError]
			if v := testutil.ToFloat64(g.Metrics.RedisFallback.WithLabelValues(useAdmission, decision)); v != 3 {
				t.Errorf("admission fallback %s = %v, want 3", decision, v)
			}
			if v := testutil.ToFloat64(g.Metrics.RedisErrors.WithLabelValues(useAdmission)); v < 1 {
				t.Errorf("admission errors = %v, want at least 1", v)
			}
			srv.Restart()
			time.Sleep(400 * time.Millisecond) // past the retry interval
			deadline := time.Now().Add(20 * time.Second)
			for {
				// The first request after the interval may still be
				// decided by on_error: it is the one whose report probes.
				s, _, b := do(t, url, body, nil)
				if s == 200 && testutil.ToFloat64(g.Metrics.RedisUp.WithLabelValues()) == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("redis back: %d %s", s, b)
				}
				time.Sleep(100 * time.Millisecond)
			}
			if depth, inflight, _ := g.rt.Load().pools["p"].adm.snapshot(); depth != 0 || inflight != 0 {
				t.Errorf("after the requests: depth %d, in flight %d", depth, inflight)
			}
			if out := logs.String(); strings.Count(out, "redis unreachable") != 1 {
				t.Errorf("want one warning, got:\n%s", out)
			}
		})
	}
}

// BenchmarkLimiterAllow is one limit decision: the in-process buckets,
// and the same buckets in a redis-server on loopback (one script call).
func BenchmarkLimiterAllow(b *testing.B) {
	k := KeyConfig{Name: "k", SHA256: HashKey("bench"), RequestsPerSecond: 1e9, Burst: 1e9, TokensPerMinute: 1e15}
	b.Run("in-process", func(b *testing.B) {
		l := NewLocalLimiter(k)
		b.ReportAllocs()
		for b.Loop() {
			l.Allow(context.Background(), time.Now(), 100)
		}
	})
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b)
		cfg, err := ParseConfig([]byte(fmt.Sprintf("pools: [{name: p, replicas: [{url: \"http://h\"}]}]\nredis: {url: %q, timeout: 5s}\n", srv.URL())))
		if err != nil {
			b.Fatal(err)
		}
		g, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer g.Close()
		l := g.newRedisLimiter(g.rt.Load().redis, k)
		b.ReportAllocs()
		for b.Loop() {
			if d := l.Allow(context.Background(), time.Now(), 100); !d.Allowed || d.Unchecked {
				b.Fatalf("%+v", d)
			}
		}
	})
}

// BenchmarkReplicaStateRequest is one non-streaming request through the
// gateway to an upstream that answers at once, one at a time, with the
// key's limits in process or in Redis (loopback), and the pool's queue
// per replica or shared through Redis: the difference in time per request
// is what the shared state adds. p50 and p99 are of the requests' times
// as the client sees them.
func BenchmarkReplicaStateRequest(b *testing.B) {
	srv := redistest.Start(b)
	up := httptest.NewServer(benchUpstream(1, 0))
	defer up.Close()
	for _, c := range []struct{ name, redis, queue string }{
		{"limits=in-process", "", "{}"},
		{"limits=redis", "redis: {url: %q, timeout: 5s}", "{}"},
		{"queue=in-process", "", "{concurrency: 64}"},
		{"queue=shared", "redis: {url: %q, timeout: 5s}", "{concurrency: 64, shared: true}"},
	} {
		b.Run(c.name, func(b *testing.B) {
			redis := c.redis
			if redis != "" {
				redis = fmt.Sprintf(redis, srv.URL())
			}
			keys := ""
			if strings.HasPrefix(c.name, "limits") {
				keys = fmt.Sprintf("keys: [{name: k, sha256: %s, requests_per_second: 1000000000, tokens_per_minute: 1000000000000}]\n", HashKey("bench-key"))
			}
			g := mustGateway(b, fmt.Sprintf("pools: [{name: p, replicas: [{url: %q}], queue: %s}]\nroutes: [{model: \"*\", pool: p}]\n%s%s\n", up.URL, c.queue, keys, redis))
			gw := startGateway(b, g)
			body := chatBody("m", false, "hi", "")
			hdr := map[string]string{"Authorization": "Bearer bench-key"}
			var times []time.Duration
			b.ReportAllocs()
			for b.Loop() {
				t0 := time.Now()
				if s, _, out := do(b, gw.URL, body, hdr); s != 200 {
					b.Fatalf("%d %s", s, out)
				}
				times = append(times, time.Since(t0))
			}
			slices.Sort(times)
			b.ReportMetric(float64(stats.Percentile(times, 50).Microseconds()), "p50-µs")
			b.ReportMetric(float64(stats.Percentile(times, 99).Microseconds()), "p99-µs")
		})
	}
}

// TestCorruptKeyIsThatKeysProblem: one key's bucket in Redis holding a
// value of another type (WRONGTYPE for a hash command) or levels that are
// no number is repaired for that key and logged as such; with fail_closed
// no other key is refused, Redis is not called unreachable, and no wait
// exceeds the bucket's window.
func TestCorruptKeyIsThatKeysProblem(t *testing.T) {
	srv := redistest.Start(t)
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a"})
	gs, gws, logs := gatewayReplicas(t, 1, fmt.Sprintf(`
pools: [{name: p, replicas: [{url: %q}]}]
routes: [{model: "*", pool: p}]
keys:
  - {name: a, sha256: %s, requests_per_second: 1, burst: 100}
  - {name: b, sha256: %s, requests_per_second: 1, burst: 100}
  - {name: c, sha256: %s, requests_per_second: 1, burst: 5}
redis: {url: %q, timeout: 2s, retry_interval: 1h, on_error: fail_closed}
`, up.URL(), HashKey("key-a"), HashKey("key-b"), HashKey("key-c"), srv.URL()))
	g, url := gs[0], gws[0].URL
	if r, err := srv.Command("SET tokentrace:limit:" + HashKey("key-a") + " corrupt"); err != nil || r != "+OK" {
		t.Fatalf("SET: %q %v", r, err)
	}
	if r, err := srv.Command("HSET tokentrace:limit:" + HashKey("key-c") + " rl -49999999 rt 1"); err != nil || r != ":2" {
		t.Fatalf("HSET: %q %v", r, err)
	}
	body := chatBody("m", false, "hi", "")
	for i := range 10 {
		for _, k := range []string{"key-b", "key-a"} {
			if s, h, b := do(t, url, body, map[string]string{"Authorization": "Bearer " + k}); s != 200 {
				t.Fatalf("request %d of %s: %d %v %s", i, k, s, h, b)
			}
		}
	}
	for range 6 {
		s, h, _ := do(t, url, body, map[string]string{"Authorization": "Bearer key-c"})
		if ra, _ := strconv.Atoi(h.Get("Retry-After")); s == 429 && ra > 5 {
			t.Fatalf("Retry-After %d for a bucket that fills in 5 s", ra)
		}
	}
	if v := testutil.ToFloat64(g.Metrics.RedisUp.WithLabelValues()); v != 1 {
		t.Errorf("redis_up = %v after one key's corrupt state", v)
	}
	out := logs.String()
	if strings.Contains(out, "unreachable") || !strings.Contains(out, "corrupt state") {
		t.Errorf("logs do not call it the key's corrupt state:\n%s", out)
	}
}
