package report

import (
	"slices"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/results"
)

// scraped is run metadata with the server's evidence as bench records it:
// preemptions during the run, the KV cache's peak usage, prefix-cache
// tokens looked up and served, and the configuration.
func scraped(preemptions, kvPeak, queries, hits float64, config map[string]string) *results.RunInfo {
	return &results.RunInfo{Mode: "open", Server: &results.ServerInfo{Engine: "tokentrace", Config: config,
		Series: []string{"running", "waiting", "kv_cache_usage", "preemptions", "prefix_cache"}},
		Samples: []results.ServerSample{
			{AtNS: 0, Running: 0, KVCacheUsage: 0.1, Preemptions: 7, PrefixQueries: 1000, PrefixHits: 10},
			{AtNS: 1e9, Running: 4, Waiting: 2, KVCacheUsage: kvPeak, Preemptions: 7 + preemptions/2},
			{AtNS: 2e9, Running: 0, KVCacheUsage: 0.1, Preemptions: 7 + preemptions,
				PrefixQueries: 1000 + queries, PrefixHits: 10 + hits},
		}}
}

var serveConfig = map[string]string{"enable_prefix_caching": "false", "enable_chunked_prefill": "true",
	"max_num_batched_tokens": "8192", "max_num_seqs": "1024", "gpu_memory_utilization": "0.9", "cache_dtype": "auto"}

func withConfig(kv ...string) map[string]string {
	m := map[string]string{}
	for k, v := range serveConfig {
		m[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func finding(rep *Report, rule string) *Finding {
	if k := findingIndex(rep, rule); k >= 0 {
		return &rep.Findings[k]
	}
	return nil
}

func remediesSay(f *Finding, s string) bool {
	return slices.ContainsFunc(f.Remedies, func(r string) bool { return strings.Contains(r, s) })
}

// Long stalls are called preemptions only when the server's counters show
// them; with counters that rule preemption out, and no prefill beside
// them, the server was blocked; without counters, the report says it
// cannot tell.
func TestStallsNamedFromTheServersCounters(t *testing.T) {
	stallRun := baseline(300, 10, 9)
	for i := 0; i < 5; i++ {
		stallRun[i*50].stallAt, stallRun[i*50].stall = 10, 2000
	}
	tests := []struct {
		name       string
		run        *results.RunInfo
		title      string
		says       []string
		remedy     string
		kvCache    bool
		noHeadroom bool
	}{
		{"preempting", scraped(12, 1.0, 0, 0, serveConfig), "preempted", []string{"12 preemption(s)", "peaked at 100%"},
			"KV-cache headroom", true, false},
		{"full cache, no counter", &results.RunInfo{Server: &results.ServerInfo{Series: []string{"kv_cache_usage"}},
			Samples: []results.ServerSample{{KVCacheUsage: 0.5}, {AtNS: 1e9, KVCacheUsage: 0.97}}},
			"preempted", []string{"peaked at 97%"}, "KV-cache headroom", true, false},
		{"counters say no", scraped(0, 0.3, 0, 0, serveConfig), "blocked",
			[]string{"not preemptions", "0 preemption(s)", "peaked at 30%"}, "CPU starvation", false, true},
		{"no counters", nil, "Token streams stalled", []string{"no server counters"}, "preemption counter", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := collectRun(Options{}, tt.run, stallRun)
			f := finding(rep, "stalls")
			if f == nil {
				t.Fatalf("no stalls finding: %+v", rep.Findings)
			}
			// The remedy is the finding's own, or (said once) that of an
			// earlier finding it points to.
			if !strings.Contains(f.Title, tt.title) || !remediesSay(f, tt.remedy) && !pointsToRemedy(rep, f, tt.remedy) {
				t.Errorf("title %q, remedies %q", f.Title, f.Remedies)
			}
			for _, s := range tt.says {
				if !strings.Contains(f.Evidence, s) {
					t.Errorf("evidence lacks %q: %s", s, f.Evidence)
				}
			}
			if got := finding(rep, "kv-cache") != nil; got != tt.kvCache {
				t.Errorf("kv-cache finding %v, want %v: %+v", got, tt.kvCache, rep.Findings)
			}
			if tt.noHeadroom {
				for _, f := range rep.Findings {
					if remediesSay(&f, "KV-cache headroom") || strings.Contains(f.Evidence, "are preemptions") {
						t.Errorf("%s blames the KV cache against the counters: %+v", f.Rule, f)
					}
				}
			}
		})
	}
}

// Stalls that overlap other requests' prefills are prefill-interference's:
// its lever is the token budget, with the step time it costs, and not
// chunked prefill when the server says it is on.
func TestInterferenceLeverFromConfig(t *testing.T) {
	for _, tt := range []struct {
		name     string
		run      *results.RunInfo
		want     []string
		wantNot  []string
		evidence string
	}{
		{"chunked on", scraped(0, 0.2, 0, 0, serveConfig),
			[]string{"max_num_batched_tokens, now 8192", "at 2048"}, []string{"chunked prefill"}, "already on"},
		{"chunked off", scraped(0, 0.2, 0, 0, withConfig("enable_chunked_prefill", "false")),
			[]string{"turn on chunked prefill", "max_num_batched_tokens, now 8192"}, nil, "not preemptions"},
		{"unknown", nil, []string{"max_num_batched_tokens"}, []string{"now 8192"}, "4× the median ITL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCollector(Options{SLOs: mustSLOs(t, "itl:p99.9<=50ms")})
			if tt.run != nil {
				c.SetRun(*tt.run)
			}
			for _, r := range interferenceRecords(true) {
				c.Add(r)
			}
			rep := c.Report()
			if len(rep.Findings) == 0 || rep.Findings[0].Rule != RulePrefillInterference {
				t.Fatalf("first finding is not prefill-interference: %+v", rep.Findings)
			}
			f := rep.Findings[0]
			for _, s := range tt.want {
				if !remediesSay(&f, s) {
					t.Errorf("remedies lack %q: %q", s, f.Remedies)
				}
			}
			for _, s := range tt.wantNot {
				if remediesSay(&f, s) {
					t.Errorf("remedies say %q: %q", s, f.Remedies)
				}
			}
			if !strings.Contains(f.Evidence, tt.evidence) {
				t.Errorf("evidence lacks %q: %s", tt.evidence, f.Evidence)
			}
			if s := finding(rep, "stalls"); s != nil && strings.Contains(s.Evidence, "preempt") && !strings.Contains(s.Evidence, "no server counters") {
				t.Errorf("stalls blamed on preemption: %+v", s)
			}
		})
	}
}

// Prompts of equal length sharing a long prefix, prefill-bound TTFT: with
// caching off the first remedy is prefix caching with the share reused;
// with it on and serving the prefix there is nothing to turn on; with it
// on and nothing shared, prefix caching is not advised at all.
func TestPrefillRemediesFromTheirEvidence(t *testing.T) {
	run := func(shared, cached int) []synthReq {
		reqs := baseline(200, 5, 3)
		for i := range reqs {
			reqs[i].input, reqs[i].shared, reqs[i].cached = 4000, shared, cached
			reqs[i].prefill = 0.03*float64(4000-cached) + float64(i%5)
			reqs[i].output = 16
		}
		return reqs
	}
	slo := Options{SLOs: mustSLOs(t, "ttft:p99<=50ms")}
	tests := []struct {
		name     string
		reqs     []synthReq
		run      *results.RunInfo
		first    string // the first remedy says
		evidence []string
		never    string // no remedy says
	}{
		{"shared, caching off", run(3601, 0), scraped(0, 0.2, 4000*200, 0, serveConfig),
			"turn on prefix caching (enable_prefix_caching is off): 90% of input tokens",
			[]string{"90% of input tokens are a prefix shared with other requests", "none as served", "prefix caching is off",
				"largest TTFT term", "ms per 1k tokens"}, "chunked prefill"},
		{"shared, caching unknown", run(3601, 0), nil,
			"prefix caching (vLLM: --enable-prefix-caching): 90%", []string{"none as served"}, ""},
		{"shared, caching on and missing", run(3601, 0),
			scraped(0, 0.99, 4000*200, 0, withConfig("enable_prefix_caching", "True")),
			"prefix caching is on but served only none", []string{"prefix caching is on"}, "turn on prefix caching"},
		{"caching on and serving", run(3601, 3584),
			scraped(0, 0.2, 4000*200, 3584*200, withConfig("enable_prefix_caching", "true")),
			"prefix caching is on and served 90%", []string{"served from its prefix cache"}, "turn on prefix caching"},
		{"nothing shared, caching on", run(0, 0), scraped(0, 0.2, 4000*200, 0, withConfig("enable_prefix_caching", "true")),
			"shorter prompts", nil, "prefix caching"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := slo
			if tt.name == "caching on and serving" {
				opts = Options{SLOs: mustSLOs(t, "ttft:p99<=5ms")} // the cache leaves 416 tokens to compute
			}
			rep := collectRun(opts, tt.run, tt.reqs)
			if len(rep.Findings) == 0 || rep.Findings[0].Rule != RulePrefillBound {
				t.Fatalf("first finding is not prefill-bound: %+v", rep.Findings)
			}
			f := rep.Findings[0]
			if !strings.Contains(f.Remedies[0], tt.first) {
				t.Errorf("first remedy %q, want %q", f.Remedies[0], tt.first)
			}
			for _, s := range tt.evidence {
				if !strings.Contains(f.Evidence, s) {
					t.Errorf("evidence lacks %q: %s", s, f.Evidence)
				}
			}
			if tt.never != "" && remediesSay(&f, tt.never) {
				t.Errorf("a remedy says %q: %q", tt.never, f.Remedies)
			}
		})
	}
}

// A closed loop of equal requests sent in waves is recognised as the
// benchmark's shape; an open loop, or varied lengths, is not.
func TestClosedLoopWaves(t *testing.T) {
	waves := func(varied bool) []synthReq {
		var out []synthReq
		for w := 0; w < 10; w++ {
			for k := 0; k < 8; k++ {
				r := baseline(1, 1, uint64(w*8+k))[0]
				r.at, r.input, r.output = float64(w)*600+0.01*float64(k), 512, 32
				if varied {
					r.input = 100 + 300*k
				}
				out = append(out, r)
			}
		}
		return out
	}
	closed := &results.RunInfo{Mode: "closed", Concurrency: 8}
	for _, tt := range []struct {
		name string
		reqs []synthReq
		run  *results.RunInfo
		want bool
	}{
		{"closed, equal", waves(false), closed, true},
		{"open, equal", waves(false), &results.RunInfo{Mode: "open", OfferedRate: 10}, false},
		{"closed, varied", waves(true), closed, false},
		{"closed, spread", baseline(80, 10, 2), closed, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rep := collectRun(Options{}, tt.run, tt.reqs)
			f := finding(rep, "closed-loop-waves")
			if (f != nil) != tt.want {
				t.Fatalf("waves finding %v, want %v: %+v", f != nil, tt.want, rep.Findings)
			}
			if f != nil && (f.Severity != "info" || !strings.Contains(f.Evidence, "10 waves of 8.0") ||
				!strings.Contains(f.Evidence, "not of production traffic")) {
				t.Errorf("%+v", f)
			}
		})
	}
}

// The report says which of the server's evidence a run lacks.
func TestLackingEvidenceIsNoted(t *testing.T) {
	reqs := baseline(50, 10, 1)
	for _, tt := range []struct {
		run  *results.RunInfo
		want string
	}{
		{&results.RunInfo{Mode: "open"}, "no server evidence: bench did not read it"},
		{&results.RunInfo{Server: &results.ServerInfo{Error: "the target's /metrics could not be read: GET /metrics: status 404"}},
			"status 404"},
		{&results.RunInfo{Server: &results.ServerInfo{Engine: "tgi", Series: []string{"running", "waiting"}},
			Samples: []results.ServerSample{{Running: 1}}}, "(tgi) exposes no KV-cache usage, preemptions, prefix-cache hits"},
	} {
		rep := collectRun(Options{}, tt.run, reqs)
		if !containsNote(rep, tt.want) {
			t.Errorf("notes %q lack %q", rep.Notes, tt.want)
		}
	}
	if rep := collectRun(Options{}, scraped(0, 0.2, 0, 0, serveConfig), reqs); slices.ContainsFunc(rep.Notes,
		func(n string) bool {
			return strings.Contains(n, "server evidence") || strings.Contains(n, "exposes no")
		}) {
		t.Errorf("complete evidence noted as lacking: %q", rep.Notes)
	}
	_ = latency.TTFT
}

// pointsToRemedy says whether f's remedies point (as for "…" above) to an
// earlier finding that gives remedy.
func pointsToRemedy(rep *Report, f *Finding, remedy string) bool {
	for _, r := range f.Remedies {
		title, ok := strings.CutPrefix(r, "as for ")
		if !ok {
			continue
		}
		title = strings.TrimSuffix(strings.Trim(strings.TrimSuffix(title, " above"), `"`), `"`)
		for i := range rep.Findings {
			if rep.Findings[i].Title == title && remediesSay(&rep.Findings[i], remedy) {
				return true
			}
		}
	}
	return false
}
