package bench

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// A run against the embedded engine keeps the server's evidence in
// run.json: its engine and configuration, and samples before the first
// request and after the last whose prefix-cache counters agree with the
// records' cached tokens.
func TestServerEvidenceInRunJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine")
	}
	srv := startSim(t, nil) // prefix caching on
	dir := filepath.Join(t.TempDir(), "run")
	src := &workload.Synthetic{Chat: true, Input: workload.Fixed(64), Output: workload.Fixed(8),
		PrefixTokens: 32, PrefixGroups: 2, Turns: 1, Seed: 3}
	cfg := Config{
		Target: Target{BaseURL: srv.URL(), Endpoint: EndpointChat, Stream: true, IgnoreEOS: true,
			ContinuousUsage: true, Timeout: time.Minute},
		Workload: src,
		Load:     workload.Load{Rate: 40, Arrival: workload.Poisson, Requests: 20, Seed: 1},
		OutDir:   dir, Command: []string{"tokentrace", "bench", "(test)"}, SkipCalibration: true,
		ScrapeInterval: 50 * time.Millisecond,
	}
	var out strings.Builder
	if _, err := Run(context.Background(), cfg, &out); err != nil {
		t.Fatal(err)
	}
	info, ok, err := results.ReadRunInfo(dir)
	if err != nil || !ok {
		t.Fatalf("run.json: %v %v", ok, err)
	}
	s := info.Server
	if s == nil || s.Engine != "tokentrace" || s.Error != "" {
		t.Fatalf("server info %+v", s)
	}
	if s.Config["enable_prefix_caching"] != "true" || s.Config["enable_chunked_prefill"] != "true" ||
		s.Config["max_num_batched_tokens"] == "" || s.Config["block_size"] != "16" {
		t.Errorf("config %v", s.Config)
	}
	for _, fig := range []string{"running", "waiting", "kv_cache_usage", "preemptions", "prefix_cache"} {
		if !slices.Contains(s.Series, fig) {
			t.Errorf("series %v lack %s", s.Series, fig)
		}
	}
	recs := readRecords(t, filepath.Join(dir, results.RequestsFile))
	var first, last int64 = recs[0].SentNS, 0
	var cached, input int
	for _, r := range recs {
		first, last = min(first, r.SentNS), max(last, r.EndNS)
		cached += r.CachedTokens
		input += r.InputTokens
		if r.SharedPrefixTokens != 33 {
			t.Errorf("%s: shared prefix %d, want the 32-token prefix and the role token", r.ID, r.SharedPrefixTokens)
		}
	}
	sm := info.Samples
	if len(sm) < 2 || sm[0].AtNS > first || sm[len(sm)-1].AtNS < last {
		t.Fatalf("%d samples from %d to %d ns, records from %d to %d", len(sm), sm[0].AtNS, sm[len(sm)-1].AtNS, first, last)
	}
	a, b := sm[0], sm[len(sm)-1]
	if got := int(b.PrefixHits - a.PrefixHits); got != cached || cached == 0 {
		t.Errorf("prefix-cache hits over the run %d, records' cached tokens %d", got, cached)
	}
	if got := int(b.PrefixQueries - a.PrefixQueries); got != input {
		t.Errorf("prefix-cache queries over the run %d, records' input tokens %d", got, input)
	}
	// Not Running: the engine publishes its counts when it plans a step,
	// so the sequence whose last token ended the run still counts as
	// running until the engine's next turn, which a final scrape right
	// after the client's [DONE] can precede (seen once in CI, under load).
	if b.Preemptions != 0 || b.Waiting != 0 {
		t.Errorf("last sample %+v", b)
	}
}

// A target without /metrics is said once and not asked again; a mid-run
// failure loses one sample.
func TestServerWatchWithoutMetrics(t *testing.T) {
	var calls, fail atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.URL.Path != "/metrics" || fail.Load() > 0 {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 2\n"))
	}))
	defer srv.Close()
	clock := int64(0)
	w := newServerWatch(Target{BaseURL: srv.URL + "/v1"}, func() int64 { clock += 10; return clock })
	w.scrapeOnce(context.Background())
	fail.Store(1)
	w.scrapeOnce(context.Background())
	fail.Store(0)
	w.scrapeOnce(context.Background())
	samples, info := w.result()
	if len(samples) != 2 || samples[0].Running != 2 || info.Engine != "vllm" || info.Error != "" {
		t.Errorf("samples %+v, info %+v", samples, info)
	}
	fail.Store(1)
	w = newServerWatch(Target{BaseURL: srv.URL}, func() int64 { return 0 })
	w.scrapeOnce(context.Background())
	w.scrapeOnce(context.Background())
	samples, info = w.result()
	if len(samples) != 0 || !strings.Contains(info.Error, "status 404") || calls.Load() != 4 {
		t.Errorf("samples %+v, info %+v, %d calls (want 4: the second watch stops after its first)", samples, info, calls.Load())
	}
}

// A tokentrace gateway's /metrics: its configuration info is in the
// run's server configuration, beside the engine's read through its
// /upstream/metrics where that answers, else alone (the watch stops).
func TestServerWatchRecordsGatewayConfig(t *testing.T) {
	for _, upstream := range []bool{false, true} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/metrics" {
				if !upstream {
					http.NotFound(w, r)
					return
				}
				w.Write([]byte("# TYPE tokentrace:scheduler_config_info gauge\n" + `tokentrace:scheduler_config_info{replica="0",max_num_seqs="4"} 1` + "\n" +
					"# TYPE vllm:num_requests_running gauge\n" + `vllm:num_requests_running{replica="0"} 1` + "\n"))
				return
			}
			w.Write([]byte("# TYPE tokentrace_gateway_config_info gauge\n" +
				`tokentrace_gateway_config_info{model="*",pool="main",replicas="1",gateway_concurrency="4",gateway_max_queue="8"} 1` + "\n"))
		}))
		w := newServerWatch(Target{BaseURL: srv.URL + "/v1"}, func() int64 { return 0 })
		w.scrapeOnce(context.Background())
		srv.Close()
		samples, info := w.result()
		want := map[string]string{"replicas": "1", "gateway_concurrency": "4", "gateway_max_queue": "8"}
		if upstream {
			want["max_num_seqs"] = "4"
		}
		got := maps.Clone(info.Config)
		delete(got, "replica") // the engine's series label, not a setting
		if !maps.Equal(got, want) || upstream != (len(samples) == 1) || upstream != (info.Engine == "tokentrace") {
			t.Errorf("upstream %v: samples %+v, info %+v", upstream, samples, info)
		}
	}
}
