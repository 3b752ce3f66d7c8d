package report

import (
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/results"
)

// The per-step token budget is offered only where it shortens the stalls,
// and never with a step time that contradicts the measured one; a
// llama.cpp server, or tokentrace's twin of one, is advised in its own
// settings (issue #37: "would take about 266 ms … instead of the 266 ms
// measured", and vLLM's max_num_batched_tokens on the llama.cpp twin).
func TestBudgetAdviceHoldsTogether(t *testing.T) {
	const msNS = 1e6
	vllm := map[string]string{"enable_chunked_prefill": "true", "max_num_batched_tokens": "8192", "max_num_seqs": "1024"}
	llama := map[string]string{"enable_chunked_prefill": "true", "max_num_batched_tokens": "2048", "max_num_seqs": "4",
		"engine_family": "llamacpp"}
	tests := []struct {
		name     string
		config   map[string]string
		ov       overlap
		itlP50   float64
		want     []string
		wantNone []string
	}{
		{"budget shortens the stall", vllm, overlap{tokens: 2048, msPerToken: 0.0277, stall: 60 * msNS}, 10.8,
			[]string{"at 1024 tokens", "within 4× the median ITL (10.8ms), instead of the 60.0ms measured"}, []string{"would not shorten"}},
		{"budget shortens, still above 4× ITL", vllm, overlap{tokens: 2048, msPerToken: 0.5, stall: 1024 * msNS}, 10,
			[]string{"at 256 tokens", "128ms, shorter than the 1.02s measured, though still above 4× the median ITL"}, []string{"within 4×"}},
		{"the issue's 266 ms: chunk already under any budget", vllm, overlap{tokens: 256, msPerToken: 1.04, stall: 266 * msNS}, 20,
			[]string{"would not shorten them"}, []string{"lower the per-step token budget", "instead of the"}},
		{"a CPU: 64 prompt tokens per stall", vllm, overlap{tokens: 64, msPerToken: 2.7159, stall: 174 * msNS}, 15.3,
			[]string{"would not shorten them", "more compute per replica"}, []string{"lower the per-step token budget"}},
		{"the llama.cpp twin", llama, overlap{tokens: 2048, msPerToken: 0.0277, stall: 60 * msNS}, 10.8,
			[]string{"-b/--batch-size", "fewer slots (-np)"}, []string{"max_num_batched_tokens", "vLLM"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &analysis{ev: &evidence{engine: "tokentrace", config: tt.config}}
			ev, rem := a.budgetRemedies(map[string]float64{}, tt.ov, tt.itlP50)
			all := ev + " do: " + strings.Join(rem, "; ")
			for _, s := range tt.want {
				if !strings.Contains(all, s) {
					t.Errorf("lacks %q:\n%s", s, all)
				}
			}
			for _, s := range tt.wantNone {
				if strings.Contains(all, s) {
					t.Errorf("says %q:\n%s", s, all)
				}
			}
		})
	}
}

// The llama.cpp twin's other advice speaks llama-server's settings too.
func TestLlamaCppTwinVocabulary(t *testing.T) {
	a := &analysis{ev: &evidence{engine: "tokentrace", config: map[string]string{"engine_family": "llamacpp@b6000"}}}
	if f := a.family(); f != "llamacpp" {
		t.Fatalf("family %q, want llamacpp", f)
	}
	got := a.limitName() + " " + strings.Join(a.kvRemedies(), " ") + " " +
		a.prefixCachingLever(prefixUse{shared: 0.75}, false, true)
	for _, vllmName := range []string{"max_num_seqs", "gpu_memory_utilization", "kv_cache_dtype", "enable_prefix_caching"} {
		if strings.Contains(got, vllmName) {
			t.Errorf("the llama.cpp twin's advice names vLLM's %s:\n%s", vllmName, got)
		}
	}
	for _, s := range []string{"-np", "--cache-type-k", "cache_prompt"} {
		if !strings.Contains(got, s) {
			t.Errorf("lacks llama-server's %s:\n%s", s, got)
		}
	}
	sim := &analysis{ev: &evidence{config: map[string]string{}}, runs: []results.RunInfo{{Simulated: true, EngineFamily: "llamacpp"}}}
	if f := sim.family(); f != "llamacpp" {
		t.Errorf("simulate --engine llamacpp's run: family %q, want llamacpp", f)
	}
	if f := (&analysis{ev: &evidence{engine: "tokentrace"}}).family(); f != "tokentrace" {
		t.Errorf("the embedded engine with vLLM's settings: family %q", f)
	}
}

// Prompts sharing 75 % of their tokens with caching off: the diagnosis
// names prefix caching (what-if's first prediction for such a run) with
// no SLO given; a TTFT SLO that holds quiets it and says so; a failing one
// leaves it to prefill-bound, whose remedy names caching (issue #37).
func TestPrefixCacheUnusedNamedAndQuieted(t *testing.T) {
	shared := baseline(200, 10, 1)
	for i := range shared {
		shared[i].shared = shared[i].input * 3 / 4
	}
	run := scraped(0, 0.2, 0, 0, serveConfig)

	rep := collectRun(Options{}, run, shared)
	f := findRule(rep.Findings, RulePrefixCacheUnused)
	if f == nil || f.Severity != SeverityInfo || !strings.Contains(f.Evidence, "75% of input tokens") ||
		len(f.Remedies) == 0 || !strings.Contains(f.Remedies[0], "turn on prefix caching (enable_prefix_caching is off)") {
		t.Fatalf("no SLO: finding %+v, want info naming prefix caching", f)
	}
	if rep.Quieted != nil {
		t.Errorf("no SLO, yet quieted: %+v", rep.Quieted)
	}
	if f := findRule(collectRun(Options{}, run, baseline(200, 10, 1)).Findings, RulePrefixCacheUnused); f != nil {
		t.Errorf("prompts that share nothing: %+v", f)
	}

	held := collectRun(Options{SLOs: mustSLOs(t, "ttft:p99<=5s")}, run, shared)
	if f := findRule(held.Findings, RulePrefixCacheUnused); f != nil {
		t.Errorf("a TTFT SLO that holds did not quiet the rule: %+v", f)
	}
	if held.Quieted == nil || !strings.Contains(held.Quieted.Line(), "ttft:p99<=5s held") ||
		!strings.Contains(held.Quieted.Line(), "Prompts share a prefix the server computes again (prefix-cache-unused)") {
		t.Fatalf("quieted %+v does not say what the passing SLO left out", held.Quieted)
	}
	var text strings.Builder
	if err := held.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "note: ttft:p99<=5s held, so the diagnosis leaves out") {
		t.Errorf("the text report does not say it:\n%s", text.String())
	}

	failed := collectRun(Options{SLOs: mustSLOs(t, "ttft:p99<=10ms")}, run, shared)
	pb := findRule(failed.Findings, RulePrefillBound)
	if pb == nil || !strings.Contains(strings.Join(pb.Remedies, ";"), "turn on prefix caching") ||
		findRule(failed.Findings, RulePrefixCacheUnused) != nil {
		t.Errorf("failing TTFT SLO: prefill-bound %+v, want it naming caching, alone", pb)
	}
}

// An SLO-failing run whose prompts all had 256 tokens, opened in Chromium
// at 1280×800: the SLO table comes before the diagnosis and the what-if
// cards; the TTFT-vs-input chart has a sensible axis (0–512, not 255–257)
// and says why it shows no trend; the stacked stage bars span the page,
// their legend beside them (issue #37). Screenshots of the first screen
// and of the charts are kept with go test -run FirstScreen -artifacts
// -outputdir DIR.
func TestFirstScreenAndChartsInBrowser(t *testing.T) {
	reqs := baseline(200, 10, 1)
	for i := range reqs {
		reqs[i].input, reqs[i].output = 256, 64
	}
	rep := collectRun(Options{SLOs: mustSLOs(t, "ttft:p99<=10ms")}, scraped(0, 0.2, 0, 0, serveConfig), reqs)
	rep.WhatIf = testWhatIf()
	var b strings.Builder
	if err := rep.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	h := b.String()
	order := []string{`id="headline"`, `id="slos"`, `id="diagnosis"`, `id="what-if"`, `id="charts"`}
	for i := 1; i < len(order); i++ {
		if a, z := strings.Index(h, order[i-1]), strings.Index(h, order[i]); a < 0 || z < a {
			t.Errorf("%s (at %d) must come before %s (at %d)", order[i-1], a, order[i], z)
		}
	}
	browser := findBrowser()
	if browser == "" {
		t.Skip("no Chromium installed (apt-get install chromium); the page's order was checked, not its rendering")
	}
	page, dom := openPage(t, browser, "report.html", []byte(h))
	fig := func(id string) string {
		i := strings.Index(dom, `id="fig-`+id+`"`)
		if i < 0 {
			t.Fatalf("chart %s missing from the rendered page", id)
		}
		start := strings.LastIndex(dom[:i], "<figure")
		f, _, _ := strings.Cut(dom[start:], "</figure>")
		return f
	}
	in := fig("ttft-input")
	if !strings.Contains(in, "every request had 256 input tokens") || strings.Contains(in, ">255.5<") ||
		!strings.Contains(in, ">500<") {
		t.Errorf("the one-length scatter has no sensible axis or does not say why:\n%.600s", in)
	}
	for _, id := range []string{"stages-e2e", "stages-ttft"} {
		if f := fig(id); !strings.Contains(f[:min(len(f), 80)], `class="wide"`) {
			t.Errorf("stage bars %s are not drawn across the page: %.80s", id, f)
		}
	}
	screenshot(t, browser, page, "first-screen-1280.png", 1280, 800)
	charts, _ := openPage(t, browser, "charts-1280.html", []byte(strings.Replace(h, "</head>",
		`<style>main > *:has(~ * #fig-ttft-input), .charts > *:has(~ #fig-ttft-input){display:none!important}</style></head>`, 1)))
	screenshot(t, browser, charts, "charts-1280.png", 1280, 800)
}

// A simulated run is named once: "simulated: 1 replica", not "simulated
// simulated: 1 replica" (simulate --like's report, issue #37).
func TestTestedNamesASimulationOnce(t *testing.T) {
	for target, want := range map[string]string{
		"simulated: 1 replica": "simulated: 1 replica · model tiny",
		"":                     "simulated — · model tiny",
	} {
		rep := &Report{Runs: []results.RunInfo{{Simulated: true, Target: target, Model: "tiny"}}}
		if got := rep.Tested(); !strings.HasPrefix(got, want) {
			t.Errorf("target %q: tested %q, want it to start %q", target, got, want)
		}
	}
}
