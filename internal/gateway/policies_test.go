package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tokentrace/tokentrace/internal/openaitest"
	"github.com/tokentrace/tokentrace/internal/scrape"
)

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func do(t testing.TB, url, body string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	resp := post(t, context.Background(), url, body, hdr)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header, string(b)
}

func poolState(g *Gateway, name string) (depth, inflight int, limit float64) {
	return g.rt.Load().pools[name].adm.snapshot()
}

func TestQueueFullRejectsWith429(t *testing.T) {
	for _, tc := range []struct {
		maxSize    int
		wantStatus int
	}{{1, 429}, {2, 200}} {
		t.Run(fmt.Sprintf("max_size=%d", tc.maxSize), func(t *testing.T) {
			gate := make(chan struct{})
			up := openaitest.Start(t, &openaitest.Upstream{Name: "a", Gate: gate})
			g := mustGateway(t, fmt.Sprintf(`
pools: [{name: p, replicas: [{url: %q}], queue: {concurrency: 1, max_size: %d}}]
routes: [{model: "*", pool: p}]
`, up.URL(), tc.maxSize))
			gw := startGateway(t, g)
			var wg sync.WaitGroup
			for range 2 { // one in flight, one queued
				wg.Add(1)
				go func() { defer wg.Done(); do(t, gw.URL, chatBody("m", false, "x", ""), nil) }()
				time.Sleep(20 * time.Millisecond)
			}
			waitFor(t, "one in flight and one queued", func() bool { d, f, _ := poolState(g, "p"); return d == 1 && f == 1 })
			var status int
			var hdr http.Header
			var body string
			thirdDone := make(chan struct{})
			go func() {
				defer close(thirdDone)
				status, hdr, body = do(t, gw.URL, chatBody("m", false, "x", ""), nil)
			}()
			if tc.wantStatus == 200 {
				waitFor(t, "the third request queued", func() bool { d, _, _ := poolState(g, "p"); return d == 2 })
				close(gate) // release the upstream
				<-thirdDone
			} else {
				<-thirdDone // refused while the others hold the pool
				close(gate)
			}
			if status != tc.wantStatus {
				t.Fatalf("third request: status %d, want %d (%s)", status, tc.wantStatus, body)
			}
			if status == 429 && (hdr.Get("Retry-After") == "" || !strings.Contains(body, "queue_full")) {
				t.Errorf("429 without Retry-After or reason: %v %s", hdr, body)
			}
			wg.Wait()
			if status == 429 {
				if got := testutil.ToFloat64(g.Metrics.Rejected.WithLabelValues("p", "queue_full")); got != 1 {
					t.Errorf("rejected{queue_full} = %v, want 1", got)
				}
			}
		})
	}
}

func TestUnmeetableDeadlineRejectedEarly(t *testing.T) {
	gate := make(chan struct{})
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a", Gate: gate})
	g := mustGateway(t, fmt.Sprintf(`
pools: [{name: p, replicas: [{url: %q}], queue: {concurrency: 1}}]
routes: [{model: "*", pool: p, early_reject: true}]
`, up.URL()))
	gw := startGateway(t, g)
	// Teach the predictor: each request holds the only slot ≥ 100 ms.
	for range 2 {
		go func() { time.Sleep(100 * time.Millisecond); gate <- struct{}{} }()
		if s, _, b := do(t, gw.URL, chatBody("m", false, "x", ""), nil); s != 200 {
			t.Fatalf("warm-up: %d %s", s, b)
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // holds the slot until released below
		defer wg.Done()
		if s, _, b := do(t, gw.URL, chatBody("m", false, "x", ""), nil); s != 200 {
			t.Errorf("held request: %d %s", s, b)
		}
	}()
	waitFor(t, "slot taken", func() bool { _, f, _ := poolState(g, "p"); return f == 1 })

	// Deadline 20 ms: the predicted wait (≥ 100 ms) already breaks it.
	s, hdr, body := do(t, gw.URL, chatBody("m", false, "x", ""), map[string]string{"X-SLO-TTFT-Ms": "20"})
	if s != 429 || hdr.Get("Retry-After") == "" || !strings.Contains(body, `"deadline"`) {
		t.Fatalf("tight deadline: status %d Retry-After %q body %s, want an early 429", s, hdr.Get("Retry-After"), body)
	}
	// Deadline 60 s: queued, then served after the held request.
	wg.Add(1)
	go func() {
		defer wg.Done()
		if s, _, b := do(t, gw.URL, chatBody("m", false, "x", ""), map[string]string{"X-SLO-TTFT-Ms": "60000"}); s != 200 {
			t.Errorf("loose deadline: %d %s", s, b)
		}
	}()
	waitFor(t, "loose request queued", func() bool { d, _, _ := poolState(g, "p"); return d == 1 })
	gate <- struct{}{}
	gate <- struct{}{}
	wg.Wait()
}

func TestAdmissionOrderPriorityThenDeadline(t *testing.T) {
	a := newAdmission(QueueConfig{Concurrency: 1, MaxSize: 10})
	now := time.Now
	if _, err := a.acquire(context.Background(), now, 0, time.Time{}, false); err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(time.Hour)
	type item struct {
		name     string
		prio     int
		deadline time.Time
	}
	items := []item{
		{"low-nodeadline", 0, time.Time{}},
		{"low-late", 0, base.Add(2 * time.Second)},
		{"low-early", 0, base.Add(time.Second)},
		{"high", 5, time.Time{}},
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for i, it := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := a.acquire(context.Background(), now, it.prio, it.deadline, false); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, it.name)
			mu.Unlock()
			a.release(time.Now(), time.Millisecond, true)
		}()
		waitFor(t, "queued", func() bool { d, _, _ := a.snapshot(); return d == i+1 })
	}
	a.release(time.Now(), time.Millisecond, true)
	wg.Wait()
	want := "high,low-early,low-late,low-nodeadline"
	if got := strings.Join(order, ","); got != want {
		t.Errorf("admission order %s, want %s", got, want)
	}
}

func TestTTFTTimeoutFallsBackToSmallerModel(t *testing.T) {
	for _, tc := range []struct {
		name        string
		bigTTFT     time.Duration
		wantFromBig bool
	}{{"slow big model", 5 * time.Second, false}, {"fast big model", 5 * time.Millisecond, true}} {
		t.Run(tc.name, func(t *testing.T) {
			big := openaitest.Start(t, &openaitest.Upstream{Name: "big", TTFT: tc.bigTTFT})
			small := openaitest.Start(t, &openaitest.Upstream{Name: "small"})
			g := mustGateway(t, fmt.Sprintf(`
pools:
  - {name: big, replicas: [{url: %q}]}
  - {name: small, replicas: [{url: %q}]}
routes:
  - {model: big-model, pool: big, fallback: small-model, timeouts: {ttft: 1s}}
  - {model: small-model, pool: small}
`, big.URL(), small.URL()))
			gw := startGateway(t, g)
			resp := post(t, context.Background(), gw.URL, chatBody("big-model", true, "x", ""), nil)
			data, _ := sseEvents(t, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || len(data) == 0 || data[len(data)-1] != "[DONE]" {
				t.Fatalf("status %d events %v", resp.StatusCode, data)
			}
			fromBig := strings.Contains(data[1], `"model":"big-model"`)
			if fromBig != tc.wantFromBig {
				t.Fatalf("answer %s: from big = %v, want %v", data[1], fromBig, tc.wantFromBig)
			}
			if !tc.wantFromBig {
				if m := small.LastBody()["model"]; m != "small-model" {
					t.Errorf("fallback request model = %v, want small-model", m)
				}
				waitFor(t, "big upstream cancelled", func() bool { return big.Canceled.Load() == 1 })
			} else if small.Served.Load() != 0 {
				t.Errorf("small model served %d requests, want 0", small.Served.Load())
			}
		})
	}
}

func TestRetryOnAnotherReplica(t *testing.T) {
	for _, retries := range []int{0, 1} {
		t.Run(fmt.Sprintf("retries=%d", retries), func(t *testing.T) {
			bad := openaitest.Start(t, &openaitest.Upstream{Name: "bad", Status: 500})
			good := openaitest.Start(t, &openaitest.Upstream{Name: "good"})
			g := mustGateway(t, fmt.Sprintf(`
pools: [{name: p, balancer: round_robin, replicas: [{url: %q}, {url: %q}]}]
routes: [{model: "*", pool: p, timeouts: {retries: %d}}]
`, bad.URL(), good.URL(), retries))
			gw := startGateway(t, g)
			statuses := map[int]int{}
			for range 4 {
				s, _, _ := do(t, gw.URL, chatBody("m", true, "x", ""), nil)
				statuses[s]++
			}
			want := map[int]int{200: 2, 500: 2}
			if retries > 0 {
				want = map[int]int{200: 4}
			}
			if fmt.Sprint(statuses) != fmt.Sprint(want) {
				t.Errorf("statuses %v, want %v", statuses, want)
			}
		})
	}
}

// TestHedgeCancelsTheLoser: a first pick that has no token after
// hedge_min_delay is hedged, and the loser cancelled; one that answers
// before it is not. The delays are far from what a busy machine can
// stretch: the slow replica's 3 s against a 50 ms delay, and a 1 min delay
// against the fast replica's immediate answer.
func TestHedgeCancelsTheLoser(t *testing.T) {
	for _, tc := range []struct {
		name       string
		slowFirst  bool
		delay      string
		wantHedges float64
	}{{"first pick slow: hedged", true, "50ms", 1}, {"first pick fast: not hedged", false, "1m", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			slow := openaitest.Start(t, &openaitest.Upstream{Name: "slow", TTFT: 3 * time.Second})
			fast := openaitest.Start(t, &openaitest.Upstream{Name: "fast"})
			reps := fmt.Sprintf("{url: %q}, {url: %q}", slow.URL(), fast.URL())
			if !tc.slowFirst {
				reps = fmt.Sprintf("{url: %q}, {url: %q}", fast.URL(), slow.URL())
			}
			g := mustGateway(t, fmt.Sprintf(`
pools: [{name: p, balancer: round_robin, replicas: [%s]}]
routes: [{model: "*", pool: p, timeouts: {hedge: true, hedge_min_delay: %s}}]
`, reps, tc.delay))
			gw := startGateway(t, g)
			if s, _, b := do(t, gw.URL, chatBody("m", true, "x", ""), nil); s != 200 || !strings.Contains(b, "[DONE]") {
				t.Fatalf("status %d %s", s, b)
			}
			if tc.slowFirst {
				waitFor(t, "slow attempt cancelled", func() bool { return slow.Canceled.Load() == 1 })
			} else if slow.Served.Load() != 0 {
				t.Errorf("slow replica got %d requests, want 0", slow.Served.Load())
			}
			if got := testutil.ToFloat64(g.Metrics.Attempts.WithLabelValues("p", "cancelled")); got != tc.wantHedges {
				t.Errorf("cancelled attempts = %v, want %v", got, tc.wantHedges)
			}
			if fast.Served.Load() != 1 {
				t.Errorf("fast served %d, want 1", fast.Served.Load())
			}
			waitFor(t, "outstanding counts back to 0", func() bool {
				for _, r := range g.rt.Load().pools["p"].replicas {
					if r.Outstanding() != 0 {
						return false
					}
				}
				return true
			})
		})
	}
}

func TestPrefixAffinityKeepsSharedPromptsTogether(t *testing.T) {
	var ups []*openaitest.Upstream
	var urls []string
	for i := range 4 {
		u := openaitest.Start(t, &openaitest.Upstream{Name: fmt.Sprint(i)})
		ups = append(ups, u)
		urls = append(urls, fmt.Sprintf("{url: %q}", u.URL()))
	}
	g := mustGateway(t, fmt.Sprintf(`
pools: [{name: p, balancer: prefix_affinity, replicas: [%s]}]
routes: [{model: "*", pool: p}]
`, strings.Join(urls, ", ")))
	gw := startGateway(t, g)
	system := strings.Repeat("You are a careful assistant with a long shared system prompt. ", 20)
	body := func(sys, user string) string {
		return fmt.Sprintf(`{"model":"m","messages":[{"role":"system","content":%q},{"role":"user","content":%q}]}`, sys, user)
	}
	for i := range 12 {
		if s, _, b := do(t, gw.URL, body(system, fmt.Sprintf("question %d", i)), nil); s != 200 {
			t.Fatalf("%d %s", s, b)
		}
	}
	used := 0
	for _, u := range ups {
		if n := u.Served.Load(); n > 0 {
			used++
			if n != 12 {
				t.Errorf("replica %s served %d of 12 shared-prefix requests", u.Name, n)
			}
		}
	}
	if used != 1 {
		t.Errorf("shared-prefix requests spread over %d replicas, want 1", used)
	}
	// Different system prompts spread over the replicas.
	for i := range 16 {
		do(t, gw.URL, body(fmt.Sprintf("system prompt number %d", i), "q"), nil)
	}
	used = 0
	for _, u := range ups {
		if u.Served.Load() > 0 {
			used++
		}
	}
	if used < 3 {
		t.Errorf("16 distinct prefixes used %d of 4 replicas, want ≥ 3", used)
	}
}

func TestPrefixAffinityFallsBackWhenOverloaded(t *testing.T) {
	reps := []*Replica{{cfg: ReplicaConfig{URL: "http://a"}}, {cfg: ReplicaConfig{URL: "http://b"}}, {cfg: ReplicaConfig{URL: "http://c"}}}
	b := &PrefixAffinity{Slack: 2}
	req := &Request{PrefixHash: 42}
	first := b.Pick(req, reps)
	if again := b.Pick(req, reps); again != first {
		t.Fatalf("same prefix picked %s then %s", first.URL(), again.URL())
	}
	first.outstanding.Store(10) // overloaded: 10 > 0 + slack
	second := b.Pick(req, reps)
	if second == first {
		t.Fatalf("overloaded replica %s still picked", first.URL())
	}
	second.outstanding.Store(10)
	third := b.Pick(req, reps)
	if third == first || third == second {
		t.Fatalf("with both preferred replicas overloaded, picked %s; want the least outstanding", third.URL())
	}
}

func TestLengthPoolsIsolateShortRequests(t *testing.T) {
	gate := make(chan struct{})
	long := openaitest.Start(t, &openaitest.Upstream{Name: "long", Gate: gate})
	short := openaitest.Start(t, &openaitest.Upstream{Name: "short"})
	g := mustGateway(t, fmt.Sprintf(`
pools:
  - {name: short, replicas: [{url: %q}], queue: {concurrency: 4}}
  - {name: long, replicas: [{url: %q}], queue: {concurrency: 4}}
routes:
  - model: "*"
    length_pools: [{max_input_tokens: 100, pool: short}, {pool: long}]
`, short.URL(), long.URL()))
	gw := startGateway(t, g)
	longPrompt := strings.Repeat("word ", 500)
	var wg sync.WaitGroup
	for range 8 { // a flood of long prompts: 4 stuck upstream, 4 queued
		wg.Add(1)
		go func() { defer wg.Done(); do(t, gw.URL, chatBody("m", true, longPrompt, ""), nil) }()
	}
	waitFor(t, "long pool saturated", func() bool {
		d, f, _ := poolState(g, "long")
		return d == 4 && f == 4 && long.Served.Load() == 4 // the 4 dispatched have reached the upstream
	})
	for range 5 {
		if s, _, b := do(t, gw.URL, chatBody("m", true, "short question", ""), nil); s != 200 || !strings.Contains(b, "[DONE]") {
			t.Fatalf("short request during the flood: %d %s", s, b)
		}
	}
	if short.Served.Load() != 5 || long.Served.Load() != 4 {
		t.Errorf("served short %d long %d, want 5 and 4", short.Served.Load(), long.Served.Load())
	}
	close(gate)
	wg.Wait()
}

func TestLengthControl(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a"})
	g := mustGateway(t, fmt.Sprintf(`
pools: [{name: p, replicas: [{url: %q}]}]
routes:
  - {model: strict, pool: p, length: {default_max_tokens: 64, max_max_tokens: 256, max_input_tokens: 50}}
  - {model: clamp, pool: p, length: {max_max_tokens: 256, on_exceed: clamp}}
`, up.URL()))
	gw := startGateway(t, g)
	cases := []struct {
		name, body string
		status     int
		upstreamMT any // max_tokens the upstream saw; nil = field absent
	}{
		{"default added", chatBody("strict", false, "hi", ""), 200, float64(64)},
		{"within limit untouched", chatBody("strict", false, "hi", `,"max_tokens":100`), 200, float64(100)},
		{"over limit rejected", chatBody("strict", false, "hi", `,"max_tokens":1000`), 400, nil},
		{"input too long rejected", chatBody("strict", false, strings.Repeat("w ", 60), ""), 400, nil},
		{"over limit clamped", chatBody("clamp", false, "hi", `,"max_tokens":1000`), 200, float64(256)},
		{"max_completion_tokens clamped", chatBody("clamp", false, "hi", `,"max_completion_tokens":1000`), 200, nil},
		{"absent: the route's limit", chatBody("clamp", false, "hi", ""), 200, float64(256)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := up.Served.Load()
			s, _, b := do(t, gw.URL, c.body, nil)
			if s != c.status {
				t.Fatalf("status %d, want %d: %s", s, c.status, b)
			}
			if s != 200 {
				if up.Served.Load() != before {
					t.Error("rejected request reached the upstream")
				}
				return
			}
			got := up.LastBody()
			if c.name == "max_completion_tokens clamped" {
				if got["max_completion_tokens"] != float64(256) {
					t.Errorf("upstream max_completion_tokens = %v, want 256", got["max_completion_tokens"])
				}
				return
			}
			if got["max_tokens"] != c.upstreamMT {
				t.Errorf("upstream max_tokens = %v, want %v", got["max_tokens"], c.upstreamMT)
			}
		})
	}
}

func TestPerKeyRateAndTokenLimits(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a", Chunks: 60}) // each answer uses its 60 tokens: nothing given back
	g := mustGateway(t, fmt.Sprintf(`
pools: [{name: p, replicas: [{url: %q}]}]
routes: [{model: "*", pool: p}]
keys:
  - {name: rps, sha256: %s, requests_per_second: 0.5, burst: 1}
  - {name: tpm, sha256: %s, tokens_per_minute: 100}
  - {name: free, sha256: %s}
`, up.URL(), HashKey("k-rps"), HashKey("k-tpm"), HashKey("k-free")))
	gw := startGateway(t, g)
	auth := func(k string) map[string]string { return map[string]string{"Authorization": "Bearer " + k} }
	body := chatBody("m", false, "hi", `,"max_tokens":60`)
	steps := []struct {
		key    string
		status int
	}{
		{"k-rps", 200}, {"k-rps", 429}, // burst 1: the second within 2 s is refused
		{"k-tpm", 200}, {"k-tpm", 429}, // 2 + 1 + 60 = 63 tokens each; 100 per minute
		{"k-free", 200}, {"k-free", 200}, {"k-free", 200},
	}
	for i, st := range steps {
		s, hdr, b := do(t, gw.URL, body, auth(st.key))
		if s != st.status {
			t.Fatalf("step %d (%s): status %d, want %d: %s", i, st.key, s, st.status, b)
		}
		if s == 429 {
			if hdr.Get("Retry-After") == "" || !strings.Contains(b, "rate_limit") {
				t.Errorf("step %d: 429 without Retry-After: %v %s", i, hdr, b)
			}
		}
		if st.key == "k-rps" && hdr.Get("X-Ratelimit-Limit-Requests") != "1" {
			t.Errorf("step %d: X-Ratelimit-Limit-Requests = %q, want 1", i, hdr.Get("X-Ratelimit-Limit-Requests"))
		}
		if st.key == "k-tpm" && hdr.Get("X-Ratelimit-Limit-Tokens") != "100" {
			t.Errorf("step %d: X-Ratelimit-Limit-Tokens = %q", i, hdr.Get("X-Ratelimit-Limit-Tokens"))
		}
	}
}

func TestQueueAwareRoutingAndStaleness(t *testing.T) {
	now := time.Unix(100, 0)
	reps := []*Replica{{cfg: ReplicaConfig{URL: "http://a"}}, {cfg: ReplicaConfig{URL: "http://b"}}}
	reps[0].waiting, reps[0].scrapedAt = 10, now
	reps[1].waiting, reps[1].scrapedAt = 0, now
	b := &QueueAware{MaxAge: 3 * time.Second, Now: func() time.Time { return now }}
	for range 4 {
		if got := b.Pick(&Request{}, reps); got != reps[1] {
			t.Fatalf("picked %s, want b (a has 10 waiting)", got.URL())
		}
	}
	reps[1].kvUsage = 0.99 // b's KV cache nearly full: 1 + 4 × 9 = 36 > 10
	reps[1].outstanding.Store(1)
	if got := b.Pick(&Request{}, reps); got != reps[0] {
		t.Fatalf("picked %s, want a (b's KV cache is full)", got.URL())
	}
	now = now.Add(10 * time.Second) // stale: falls back to outstanding counts
	if got := b.Pick(&Request{}, reps); got != reps[0] {
		t.Fatalf("stale figures: picked %s, want a (fewer outstanding)", got.URL())
	}
}

func TestScrapeReadsVLLMGauges(t *testing.T) {
	text := `# HELP vllm:num_requests_waiting Number of requests waiting.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="a"} 3
vllm:num_requests_waiting{engine="1",model_name="a"} 4
vllm:num_requests_waiting_other 100
vllm:kv_cache_usage_perc{engine="0",model_name="a"} 0.25
`
	fams, err := scrape.Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	e := scrape.ForKind("vllm")
	if w, _ := fams.First(e.Waiting); w != 7 {
		t.Errorf("waiting = %v, want 3+4 = 7", w)
	}
	if kv, _ := fams.First(e.KVUsage); kv != 0.25 {
		t.Errorf("kv = %v, want 0.25", kv)
	}
	if _, err := scrape.Parse(strings.NewReader("vllm:num_requests_waiting{a=\"b\"} x\n")); err == nil {
		t.Error("a non-numeric value was accepted")
	}

	up := openaitest.Start(t, &openaitest.Upstream{Name: "a"})
	r := &Replica{cfg: ReplicaConfig{URL: up.URL(), Kind: "vllm"}}
	now := time.Unix(50, 0)
	if err := r.scrape(context.Background(), http.DefaultClient, now); err != nil {
		t.Fatal(err)
	}
	w, kv, fresh := r.load(now.Add(time.Second), 3*time.Second)
	if w != 0 || kv != 0.5 || !fresh {
		t.Errorf("load = %v, %v, fresh %v; want 0, 0.5, true", w, kv, fresh)
	}
	if _, _, fresh := r.load(now.Add(4*time.Second), 3*time.Second); fresh {
		t.Error("figures 4 s old with max age 3 s reported fresh")
	}
}

func TestPriorityHeaderOrdersTheQueue(t *testing.T) {
	gate := make(chan struct{})
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a", Gate: gate})
	g := mustGateway(t, fmt.Sprintf(`
pools: [{name: p, replicas: [{url: %q}], queue: {concurrency: 1}}]
routes: [{model: "*", pool: p}]
`, up.URL()))
	gw := startGateway(t, g)
	var wg sync.WaitGroup
	send := func(content, prio string, depth, inflight int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if s, _, b := do(t, gw.URL, chatBody("m", false, content, ""), map[string]string{"X-Priority": prio}); s != 200 {
				t.Errorf("%s: %d %s", content, s, b)
			}
		}()
		waitFor(t, content+" queued", func() bool { d, f, _ := poolState(g, "p"); return d == depth && f == inflight })
	}
	send("first", "0", 0, 1)
	send("low", "0", 1, 1)
	send("high", "9", 2, 1)
	close(gate) // one request upstream at a time: they leave in queue order
	wg.Wait()
	var order []string
	for _, b := range up.Bodies() {
		msgs := b["messages"].([]any)
		order = append(order, msgs[0].(map[string]any)["content"].(string))
	}
	if got := strings.Join(order, ","); got != "first,high,low" {
		t.Errorf("upstream order %s, want first,high,low", got)
	}
}

func TestModelsListedByReplicasAreRouted(t *testing.T) {
	a := openaitest.Start(t, &openaitest.Upstream{Name: "a"})
	b := openaitest.Start(t, &openaitest.Upstream{Name: "b"})
	g := mustGateway(t, fmt.Sprintf(`
pools:
  - {name: pa, replicas: [{url: %q, models: [model-a]}]}
  - {name: pb, replicas: [{url: %q, models: [model-b]}]}
routes: [{model: alias-b, pool: pb, upstream_model: model-b}]
`, a.URL(), b.URL()))
	gw := startGateway(t, g)
	for _, c := range []struct {
		model string
		want  *openaitest.Upstream
	}{{"model-a", a}, {"model-b", b}, {"alias-b", b}} {
		before := c.want.Served.Load()
		if s, _, body := do(t, gw.URL, chatBody(c.model, false, "x", ""), nil); s != 200 {
			t.Fatalf("%s: %d %s", c.model, s, body)
		}
		if c.want.Served.Load() != before+1 {
			t.Errorf("%s not served by %s", c.model, c.want.Name)
		}
	}
	if s, _, _ := do(t, gw.URL, chatBody("model-c", false, "x", ""), nil); s != 404 {
		t.Errorf("unlisted model: %d, want 404", s)
	}
}
