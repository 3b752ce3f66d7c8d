package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/scrape"
	"github.com/tokentrace/tokentrace/internal/serve"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
)

// startCachingServe runs serve on addr with prefix caching and a KV cache
// of 8,192 tokens: about seven of the test's twelve 1,000-token system
// prompts fit, not all twelve. Restarting one on the address of one
// closed before (a port freed) gives a fresh cache behind the same URL.
func startCachingServe(t *testing.T, addr string) *serve.Server {
	t.Helper()
	var s *serve.Server
	var err error
	for range 50 {
		if s, err = startCachingServeOnce(addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func startCachingServeOnce(addr string) (*serve.Server, error) {
	return serve.Start(context.Background(), serve.Config{Engine: engine.Config{
		Model:               simModel,
		StepTimer:           engine.StepTimerFunc(func(*perfmodel.Batch) time.Duration { return time.Millisecond }),
		BlockSize:           16,
		NumBlocks:           512,
		MaxModelLen:         4096,
		MaxNumSeqs:          16,
		EnablePrefixCaching: true,
		Seed:                1,
	}}, addr)
}

// prefixHitRate is the serves' prompt tokens served from the prefix cache
// over those looked up, from their /metrics (internal/scrape).
func prefixHitRate(t *testing.T, serves []*serve.Server) float64 {
	t.Helper()
	var q, h float64
	for _, s := range serves {
		fams, err := scrape.Get(context.Background(), http.DefaultClient, serveBase(s)+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		sample := scrape.ForKind("tokentrace").Read(fams)
		q += sample.PrefixQueries
		h += sample.PrefixHits
	}
	if q == 0 {
		t.Fatal("the serves report no prefix-cache lookups")
	}
	return h / q
}

// replicaRun sends the workload — 120 chat requests, each with one of
// twelve 1,000-token system prompts (in a seeded random order) and its own
// short question, workers at a time — through the given gateways in turn
// (request i through gateway i mod n) to three fresh serves with prefix
// caching on addrs, and returns their prefix-cache hit rate. The serves
// are closed when it returns, so that the next run can listen on the same
// addresses: the same replica URLs hash prefixes alike.
func replicaRun(t *testing.T, addrs []string, gateways, workers int, balancer string) float64 {
	t.Helper()
	var serves []*serve.Server
	for _, a := range addrs {
		serves = append(serves, startCachingServe(t, a))
	}
	defer func() {
		for _, s := range serves {
			_ = s.Close()
		}
	}()
	var reps []string
	for _, s := range serves {
		reps = append(reps, fmt.Sprintf("{url: %q, kind: tokentrace}", serveBase(s)))
	}
	_, gws, _ := gatewayReplicas(t, gateways, fmt.Sprintf("pools: [{name: p, balancer: %s, replicas: [%s]}]\nroutes: [{model: %q, pool: p}]\n",
		balancer, strings.Join(reps, ", "), simModel))
	var prefixes []string
	for g := range 12 {
		prefixes = append(prefixes, tokenizer.Filler(1000, uint64(100+g)))
	}
	rng := rand.New(rand.NewPCG(7, 7))
	type job struct {
		i      int
		prefix string
	}
	jobs := make(chan job)
	go func() {
		for i := range 120 {
			jobs <- job{i, prefixes[rng.IntN(len(prefixes))]}
		}
		close(jobs)
	}()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for j := range jobs {
				msgs, _ := json.Marshal([]map[string]string{{"role": "system", "content": j.prefix}, {"role": "user", "content": tokenizer.Filler(30, uint64(1000+j.i))}})
				body := fmt.Sprintf(`{"model":%q,"messages":%s,"max_tokens":4}`, simModel, msgs)
				if s, _, b := do(t, gws[j.i%gateways].URL, body, nil); s != 200 {
					t.Errorf("request %d: %d %s", j.i, s, b)
				}
			}
		})
	}
	wg.Wait()
	return prefixHitRate(t, serves)
}

// TestPrefixAffinityAcrossGatewayReplicas: two gateway replicas that
// never talk to each other send each system prompt to the same serve, so
// the three serves' prefix-cache hit rate is as high as behind one
// gateway; round robin from two gateways spreads every prompt over every
// serve and the caches, which hold about seven of the twelve, thrash.
func TestPrefixAffinityAcrossGatewayReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 15 serves (-short)")
	}
	var addrs []string
	for range 3 {
		s := startCachingServe(t, "127.0.0.1:0")
		addrs = append(addrs, strings.TrimPrefix(serveBase(s), "http://"))
		_ = s.Close()
	}
	rr := replicaRun(t, addrs, 2, 3, "round_robin")
	one, two := replicaRun(t, addrs, 1, 3, "prefix_affinity"), replicaRun(t, addrs, 2, 3, "prefix_affinity")
	t.Logf("prefix_affinity: prefix-cache hit rate %.1f%% behind one gateway, %.1f%% behind two (round robin behind two: %.1f%%)", 100*one, 100*two, 100*rr)
	// The routing is the same from one gateway or two; the serves' timing
	// may evict a block or two more or less out of 120 requests (82.3 %
	// against 83.6 % seen on a busy machine).
	if two < one-0.03 {
		t.Errorf("prefix_affinity: hit rate %.3f behind two gateways, below %.3f behind one", two, one)
	}
	if two < rr+0.15 {
		t.Errorf("prefix_affinity: hit rate %.3f behind two gateways, not above round robin's %.3f", two, rr)
	}
	// Bounded loads bound each gateway's own outstanding requests: with
	// two gateways each sees about half of the three in flight, so its
	// bound ⌈1.25 × m / 3⌉ is 1 more often and a prompt's second
	// concurrent request spills to its next serve. It keeps prompts
	// together better than round robin, but not as well as behind one
	// gateway (docs/scale.md, "Gateway replicas").
	bOne, bTwo := replicaRun(t, addrs, 1, 3, "prefix_bounded_load"), replicaRun(t, addrs, 2, 3, "prefix_bounded_load")
	t.Logf("prefix_bounded_load: prefix-cache hit rate %.1f%% behind one gateway, %.1f%% behind two", 100*bOne, 100*bTwo)
	if bTwo < rr+0.05 {
		t.Errorf("prefix_bounded_load: hit rate %.3f behind two gateways, not above round robin's %.3f", bTwo, rr)
	}
}

// TestScrapeFailureLoggedOnce: a replica whose /metrics fails is reported
// at warn once, not once per scrape, and the logger is in place before the
// first scrape (the race detector checks it).
func TestScrapeFailureLoggedOnce(t *testing.T) {
	var scrapes atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scrapes.Add(1)
		http.Error(w, "no metrics here", http.StatusInternalServerError)
	}))
	defer up.Close()
	cfg, err := ParseConfig([]byte(fmt.Sprintf("pools: [{name: p, scrape_interval: 2ms, replicas: [{url: %q}]}]\nroutes: [{model: \"*\", pool: p}]\n", up.URL)))
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	g, err := newWithLog(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	waitFor(t, "five scrapes", func() bool { return scrapes.Load() >= 5 })
	if n := strings.Count(logs.String(), "scrape failing"); n != 1 || !strings.Contains(logs.String(), "status 500") {
		t.Errorf("%d warnings for one failing replica, want 1 saying why: %s", n, logs.String())
	}
}

// TestModelsLogsReplicaLeftOut: a replica whose /v1/models fails is left
// out of the list, and the log says which and why.
func TestModelsLogsReplicaLeftOut(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	}))
	defer up.Close()
	g := mustGateway(t, fmt.Sprintf("pools: [{name: p, replicas: [{url: %q, models: [listed]}]}]\nroutes: [{model: \"*\", pool: p}]\n", up.URL))
	var logs lockedBuffer
	g.Log = slog.New(slog.NewTextHandler(&logs, nil))
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/models", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"listed"`) {
		t.Fatalf("status %d body %s", rec.Code, rec.Body.String())
	}
	if l := logs.String(); !strings.Contains(l, "left out") || !strings.Contains(l, up.URL) || !strings.Contains(l, "status 503") {
		t.Errorf("log does not say which replica was left out and why: %s", l)
	}
}
