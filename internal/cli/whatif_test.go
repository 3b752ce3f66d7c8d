package cli

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/prediction"
	"github.com/tokentrace/tokentrace/internal/report"
)

// simulated runs tokentrace simulate into a new folder and returns it.
func simulated(t *testing.T, args ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	if out, err := run(t, append([]string{"simulate", "--output-dir", dir}, args...)...); err != nil {
		t.Fatalf("simulate %v: %v\n%s", args, err, out)
	}
	return dir
}

// whatIfJSON reports dir as JSON and returns the report's what-if.
func whatIfJSON(t *testing.T, dir string, args ...string) *report.Report {
	t.Helper()
	out, err := run(t, append([]string{"report", dir, "--format", "json"}, args...)...)
	var ee *ExitError
	if err != nil && (!errors.As(err, &ee) || ee.Code != ExitSLOFailed) {
		t.Fatalf("report: %v\n%s", err, out)
	}
	var rep report.Report
	if err := json.Unmarshal([]byte(out[:strings.LastIndex(out, "}")+1]), &rep); err != nil {
		t.Fatalf("report JSON: %v\n%s", err, out)
	}
	return &rep
}

func remedy(w *prediction.Predictions, lever string) (int, *prediction.Remedy) {
	for i := range w.Remedies {
		if w.Remedies[i].Lever == lever {
			return i, &w.Remedies[i]
		}
	}
	return -1, nil
}

func value(v []*float64, i int) float64 {
	if i >= len(v) || v[i] == nil {
		return -1
	}
	return *v[i]
}

// A 4,000-token prompt that shares 3,600 tokens with every other, prefix
// caching off: the TTFT SLO fails on prefill, and turning prefix caching on
// is the remedy the twin ranks first, with a large drop.
func TestWhatIfPrefixCachingFixesTTFT(t *testing.T) {
	dir := simulated(t, "--rate", "4", "--requests", "160", "--prefix-tokens", "3600", "--prefix-groups", "1",
		"--input-tokens", "4000", "--output-tokens", "32")
	rep := whatIfJSON(t, dir, "--slo", "ttft:p99<=100ms", "--what-if", "prefix-caching,weights,tensor-parallel")
	w := rep.WhatIf
	if w == nil {
		t.Fatalf("no what-if; notes %v", rep.Notes)
	}
	i, r := remedy(w, "prefix-caching")
	if i != 0 || r.Effect == nil || *r.Effect > 0.3 {
		t.Fatalf("prefix caching ranked %d with effect %v; remedies %+v", i, r, w.Remedies)
	}
	if b, m := value(w.Baseline.ValuesMS, 0), w.MeasuredMS[0]; b < 0.8*m || b > 1.25*m {
		t.Errorf("the twin's baseline TTFT P99 %.1f ms is far from the run's own %.1f ms (same engine, same seed)", b, m)
	}
	if value(r.After.ValuesMS, 0) > 100 || !r.After.Meets || r.After.GoodputRPS <= w.Baseline.GoodputRPS {
		t.Errorf("prefix caching: after %+v, baseline goodput %v", r.After, w.Baseline.GoodputRPS)
	}
}

// Answers of lognormal length under an E2E SLO: capping max_tokens at the
// P90 output length cuts P99 E2E, by what the output-length finding
// computes from each request's own TPOT; a cap the user gives is tried too.
func TestWhatIfMaxTokensCapHelpsE2E(t *testing.T) {
	dir := simulated(t, "--rate", "2", "--requests", "300", "--input-tokens", "200", "--output-tokens", "lognormal:mean=100,sigma=1")
	rep := whatIfJSON(t, dir, "--slo", "e2e:p99<=1s", "--max-tokens-cap", "100")
	w := rep.WhatIf
	if w == nil || len(w.Remedies) != 2 {
		t.Fatalf("what-if %+v; notes %v", w, rep.Notes)
	}
	var cut float64
	for _, f := range rep.Findings {
		if f.Rule == report.RuleOutputLength {
			cut = f.Numbers["p99_e2e_capped_ms"]
		}
	}
	for _, r := range w.Remedies {
		if r.Lever != "max-tokens-cap" || r.Effect == nil || *r.Effect > 0.6 {
			t.Errorf("remedy %+v: want a max_tokens cap that cuts P99 E2E by more than 40%%", r)
		}
	}
	if got := value(w.Remedies[1].After.ValuesMS, 0); cut > 0 && (got < 0.9*cut || got > 1.1*cut) {
		t.Errorf("P90 cap: twin P99 E2E %.0f ms, the finding's own estimate %.0f ms", got, cut)
	}
	if !strings.Contains(w.Remedies[0].Title, "100") {
		t.Errorf("the tighter cap (100) should rank first: %+v", w.Remedies)
	}
}

// Overload: 4 req/s against at most 2 running. One more replica cuts TTFT
// P99 from tens of seconds to about a second, the replicas needed to meet
// the SLO are found, and prefix caching — nothing is shared — predicts
// no change.
func TestWhatIfReplicasForOverloadAndALeverThatDoesNotHelp(t *testing.T) {
	dir := simulated(t, "--rate", "4", "--requests", "300", "--max-num-seqs", "2", "--input-tokens", "500", "--output-tokens", "100")
	rep := whatIfJSON(t, dir, "--slo", "ttft:p99<=1s", "--what-if", "replicas,prefix-caching")
	w := rep.WhatIf
	if w == nil {
		t.Fatalf("no what-if; notes %v", rep.Notes)
	}
	before := value(w.Baseline.ValuesMS, 0)
	if before < 10000 || w.Baseline.KeepsUp {
		t.Fatalf("baseline %+v: want an overloaded twin (TTFT P99 of tens of seconds)", w.Baseline)
	}
	_, one := remedy(w, "replicas")
	if one == nil || value(one.After.ValuesMS, 0) > 0.1*before || !one.After.KeepsUp {
		t.Errorf("one more replica: %+v", one)
	}
	i, need := remedy(w, "replicas-needed")
	if i != 0 || need.Setting != "replicas: 1 → 3" || !need.After.Meets {
		t.Errorf("replicas needed (ranked %d): %+v", i, need)
	}
	_, pc := remedy(w, "prefix-caching")
	if pc == nil || pc.Effect == nil || *pc.Effect < 0.95 || *pc.Effect > 1.05 {
		t.Errorf("prefix caching with nothing shared: %+v, want roughly no change", pc)
	}
}

// The JSON form: every key of the what-if and of a remedy, by name.
func TestWhatIfJSONShape(t *testing.T) {
	dir := simulated(t, "--rate", "4", "--requests", "120", "--max-num-seqs", "2", "--input-tokens", "500", "--output-tokens", "100")
	out, err := run(t, "report", dir, "--format", "json", "--slo", "ttft:p99<=1s", "--what-if", "replicas")
	var ee *ExitError
	if err != nil && (!errors.As(err, &ee) || ee.Code != ExitSLOFailed) {
		t.Fatal(err)
	}
	var doc struct {
		WhatIf map[string]json.RawMessage `json:"what_if"`
	}
	if err := json.Unmarshal([]byte(out[:strings.LastIndex(out, "}")+1]), &doc); err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]json.RawMessage) []string {
		var k []string
		for n := range m {
			k = append(k, n)
		}
		slices.Sort(k)
		return k
	}
	want := []string{"assumptions", "baseline", "basis", "deployment", "elapsed_s", "fidelity", "interval80", "judged", "measured_ms", "objectives", "remedies", "run", "seed", "simulations", "stated_error", "workload"}
	if diff := cmp.Diff(want, keys(doc.WhatIf)); diff != "" {
		t.Errorf("what_if keys (-want +got):\n%s", diff)
	}
	var base map[string]json.RawMessage
	var rems []map[string]json.RawMessage
	if err := json.Unmarshal(doc.WhatIf["baseline"], &base); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(doc.WhatIf["remedies"], &rems); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"failed_share", "goodput_rps", "keeps_up", "meets", "peak_batch", "values_ms"}, keys(base)); diff != "" {
		t.Errorf("baseline keys (-want +got):\n%s", diff)
	}
	if len(rems) == 0 {
		t.Fatal("no remedies")
	}
	if diff := cmp.Diff([]string{"after", "applied", "assumes", "effect", "for", "interval80", "lever", "setting", "title"}, keys(rems[0])); diff != "" {
		t.Errorf("remedy keys (-want +got):\n%s", diff)
	}
	var objectives []string
	if err := json.Unmarshal(doc.WhatIf["objectives"], &objectives); err != nil {
		t.Fatal(err)
	}
	if string(doc.WhatIf["basis"]) != `"the run's engine"` || !slices.Equal(objectives, []string{"ttft:p99<=1s"}) {
		t.Errorf("basis %s, objectives %s", doc.WhatIf["basis"], doc.WhatIf["objectives"])
	}
	var iv prediction.Interval // the GPU family's defaults: the cross-source interval, marked
	if err := json.Unmarshal(doc.WhatIf["interval80"], &iv); err != nil || !iv.Outside || iv.TTFT != engine.CrossSource80.TTFT {
		t.Errorf("interval80 %s: %v", doc.WhatIf["interval80"], err)
	}
}

// With a profile, predictions outside its fitted range say so, and a lever
// that changes the precision says its constants are carried there.
func TestWhatIfProfileExtrapolates(t *testing.T) {
	dir := simulated(t, "--rate", "4", "--requests", "120", "--max-num-seqs", "2", "--input-tokens", "500", "--output-tokens", "150")
	rep := whatIfJSON(t, dir, "--slo", "ttft:p99<=1s", "--what-if", "replicas,weights", "--profile", writeProfile(t, t.TempDir(), "Llama-3.1-8B"))
	w := rep.WhatIf
	if w == nil || w.Basis != "profile Llama-3.1-8B.yaml" {
		t.Fatalf("what-if %+v", w)
	}
	var r *prediction.Remedy
	for i := range w.Remedies {
		if w.Remedies[i].Title == "fp8 weights" {
			r = &w.Remedies[i]
		}
	}
	if r == nil || !slices.ContainsFunc(r.Extrapolates, func(s string) bool { return strings.Contains(s, "carried to TP1, fp8 weights") }) ||
		!slices.ContainsFunc(r.Extrapolates, func(s string) bool { return strings.Contains(s, "output 150 is outside the fitted 10–100") }) {
		t.Errorf("fp8 weights under a bf16 profile: %+v", r)
	}
}

// Bad input: a profile for another model is refused (exit 2, naming the
// flag and the difference); a run from a real server without a profile is
// reported with a note saying what-if needs one.
func TestWhatIfBadInput(t *testing.T) {
	dir := simulated(t, "--rate", "4", "--requests", "60", "--max-num-seqs", "2", "--input-tokens", "500", "--output-tokens", "100")
	_, err := run(t, "report", dir, "--slo", "ttft:p99<=1s", "--profile", writeProfile(t, t.TempDir(), "Llama-3.1-70B"))
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != ExitUsage || !strings.Contains(err.Error(), "--profile") || !strings.Contains(err.Error(), "model Llama-3.1-70B, not Llama-3.1-8B") {
		t.Errorf("profile for another model: %v", err)
	}
	for _, args := range [][]string{{"--what-if", "turbo"}, {"--speculative-alpha", "1.5"}, {"--max-tokens-cap", "-1"}, {"--kv-link", "pigeon"}} {
		_, err := run(t, append([]string{"report", dir}, args...)...)
		if !errors.As(err, &ee) || ee.Code != ExitUsage || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("%v: %v, want exit 2 naming the flag", args, err)
		}
	}
	// The same records, as from a real server.
	for name, body := range map[string]string{"run.json": `{"target":"http://gpu:8000","mode":"open","offered_rps":4}`,
		"config.json": `{"config":{"url":"http://gpu:8000"}}`} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rep := whatIfJSON(t, dir, "--slo", "ttft:p99<=1s")
	if rep.WhatIf != nil || !slices.ContainsFunc(rep.Notes, func(n string) bool {
		return strings.Contains(n, "what-if needs its calibrated profile (--profile FILE")
	}) {
		t.Errorf("a real server's run without a profile: what-if %+v, notes %v", rep.WhatIf, rep.Notes)
	}
	// With the profile, the records' arrivals and lengths are replayed.
	rep = whatIfJSON(t, dir, "--slo", "ttft:p99<=1s", "--what-if", "replicas", "--profile", writeProfile(t, t.TempDir(), "Llama-3.1-8B"))
	if rep.WhatIf == nil || !strings.Contains(rep.WhatIf.Workload, "replayed at their arrival times") {
		t.Errorf("a real server's run with a profile: %+v, notes %v", rep.WhatIf, rep.Notes)
	}
}

// A run of bench against its embedded engine: the twin's engine is the
// --sim-* flags config.json records, its workload bench's flags.
func TestWhatIfEmbeddedEngineRun(t *testing.T) {
	dir := simulated(t, "--rate", "4", "--requests", "60", "--max-num-seqs", "2", "--input-tokens", "500", "--output-tokens", "100")
	for name, body := range map[string]string{"run.json": `{"target":"embedded","mode":"open","offered_rps":4}`,
		"config.json": `{"target":{"BaseURL":"http://127.0.0.1:1/v1"},"config":{"url":"","rate":"4","requests":"60","input-tokens":"500","output-tokens":"100","sim-max-num-seqs":"2"}}`} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rep := whatIfJSON(t, dir, "--slo", "ttft:p99<=1s", "--what-if", "replicas")
	w := rep.WhatIf
	if w == nil || w.Basis != "the embedded engine's settings" || !strings.Contains(w.Deployment, "max_num_seqs 2,") ||
		!strings.Contains(w.Workload, "prompts 500 tokens, max_tokens 100") {
		t.Fatalf("what-if %+v; notes %v", w, rep.Notes)
	}
	if b, m := value(w.Baseline.ValuesMS, 0), w.MeasuredMS[0]; b < 0.7*m || b > 1.4*m {
		t.Errorf("the twin's baseline %.0f ms, the run's %.0f ms: the same engine and workload should agree", b, m)
	}
}

// A real server's run with --profile: the engine is the profile's with the
// batch settings the server exposed, and bench's workload flags are
// replayed when its answers ran to max_tokens.
func TestWhatIfMeasuredRunWithProfile(t *testing.T) {
	dir := simulated(t, "--rate", "4", "--requests", "60", "--max-num-seqs", "2", "--input-tokens", "500", "--output-tokens", "100")
	for name, body := range map[string]string{
		"run.json": `{"target":"http://gpu:8000","model":"meta-llama/Llama-3.1-8B-Instruct","mode":"open","offered_rps":4,
			"server":{"engine":"vllm","config":{"max_num_seqs":"2","enable_prefix_caching":"false"}}}`,
		"config.json": `{"config":{"url":"http://gpu:8000","rate":"4","requests":"60","input-tokens":"500","output-tokens":"100","ignore-eos":"true"}}`} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rep := whatIfJSON(t, dir, "--slo", "ttft:p99<=1s", "--what-if", "replicas", "--profile", writeProfile(t, t.TempDir(), "Llama-3.1-8B"))
	w := rep.WhatIf
	if w == nil || !strings.Contains(w.Deployment, "max_num_seqs 2,") || !strings.Contains(w.Workload, "prompts 500 tokens, max_tokens 100") {
		t.Fatalf("what-if %+v; notes %v", w, rep.Notes)
	}
	if !slices.ContainsFunc(w.Assumptions, func(s string) bool {
		return strings.Contains(s, "did not expose max_num_batched_tokens: the twin takes vLLM's default")
	}) {
		t.Errorf("the setting the server did not expose is not said: %v", w.Assumptions)
	}
	// A llama.cpp server exposes none of its settings: the twin takes the
	// llama.cpp family's (4 slots), not vLLM's, and says so in its words.
	if err := os.WriteFile(filepath.Join(dir, "run.json"), []byte(`{"target":"http://cpu:8080","model":"Llama-3.1-8B","mode":"open","offered_rps":4,"server":{"engine":"llamacpp"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	rep = whatIfJSON(t, dir, "--slo", "ttft:p99<=1s", "--what-if", "replicas", "--profile", writeProfile(t, t.TempDir(), "Llama-3.1-8B"))
	if w := rep.WhatIf; w == nil || !strings.Contains(w.Deployment, "slots (-np) 4,") ||
		!slices.ContainsFunc(w.Assumptions, func(s string) bool { return strings.Contains(s, "the twin takes llama.cpp's default") }) {
		t.Errorf("llama.cpp run: what-if %+v; notes %v", w, rep.Notes)
	}
}

// A run given as a span (--duration) rather than a count: report still
// writes, and what-if re-simulates the requests the span stood for — for
// simulate's runs and bench's alike (once "duration 0s: must be positive"
// and exit 2).
func TestWhatIfDurationRuns(t *testing.T) {
	sim := simulated(t, "--rate", "20", "--duration", "10s")
	rep := whatIfJSON(t, sim, "--slo", "ttft:p99<=5ms", "--what-if", "replicas")
	if rep.WhatIf == nil || !strings.Contains(rep.WhatIf.Workload, "200 requests") {
		t.Errorf("simulate --duration: what-if %+v; notes %v", rep.WhatIf, rep.Notes)
	}
	dir := filepath.Join(t.TempDir(), "bench")
	if out, err := run(t, "bench", "--output-dir", dir, "--rate", "20", "--duration", "500ms", "--input-tokens", "32", "--output-tokens", "4"); err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	rep = whatIfJSON(t, dir, "--slo", "ttft:p99<=1us", "--what-if", "replicas")
	if rep.WhatIf == nil || !strings.Contains(rep.WhatIf.Workload, "10 requests") {
		t.Errorf("bench --duration: what-if %+v; notes %v", rep.WhatIf, rep.Notes)
	}
	if out, err := run(t, "report", dir); err != nil || !strings.Contains(out, "TTFT") {
		t.Errorf("bench --duration, plain report: %v\n%s", err, out)
	}
}

// What-if is optional: a run whose recorded flags cannot be rebuilt into
// a workload still gets its report, the failure a note, exit 0.
func TestWhatIfFailureIsANote(t *testing.T) {
	dir := simulated(t, "--rate", "4", "--requests", "20", "--input-tokens", "100", "--output-tokens", "8")
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"config":{"rate":"4","requests":"20","input-tokens":"banana"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "report", dir, "--what-if", "replicas")
	if err != nil || !strings.Contains(out, "what-if: skipped:") || !strings.Contains(out, "banana") {
		t.Errorf("report: %v\n%s", err, out)
	}
}

// A profile calibrated on a custom hardware entry: report --gpu-file (the
// flag every command that prices a step takes) lets what-if use it; without
// the file the GPU is unknown, exit 2.
func TestWhatIfProfileOnCustomGPU(t *testing.T) {
	tmp := t.TempDir()
	gpus := filepath.Join(tmp, "gpus.yaml")
	if err := os.WriteFile(gpus, []byte("- name: lab-gpu\n  memory_gib: 80\n  hbm_gb_s: 2000\n  bf16_tflops: 500\n  interconnect_gb_s: 64\n  source: test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	prof := writeProfile(t, tmp, "Llama-3.1-8B")
	b, err := os.ReadFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prof, []byte(strings.Replace(string(b), "gpu: H100-SXM", "gpu: lab-gpu", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := simulated(t, "--rate", "4", "--requests", "60", "--max-num-seqs", "2", "--input-tokens", "500", "--output-tokens", "100")
	for name, body := range map[string]string{
		"run.json":    `{"target":"http://gpu:8000","model":"Llama-3.1-8B","mode":"open","offered_rps":4,"server":{"engine":"vllm","config":{"max_num_seqs":"2"}}}`,
		"config.json": `{"config":{"url":"http://gpu:8000","rate":"4","requests":"60","input-tokens":"500","output-tokens":"100","ignore-eos":"true"}}`} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rep := whatIfJSON(t, dir, "--slo", "ttft:p99<=1s", "--what-if", "replicas", "--profile", prof, "--gpu-file", gpus)
	if w := rep.WhatIf; w == nil || !strings.Contains(w.Deployment, "lab-gpu") {
		t.Fatalf("what-if %+v; notes %v", w, rep.Notes)
	}
	out, err := run(t, "report", dir, "--what-if", "replicas", "--profile", prof)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != ExitUsage || !strings.Contains(err.Error(), "lab-gpu") {
		t.Errorf("without --gpu-file: %v, want exit 2 naming the unknown GPU\n%s", err, out)
	}
	_, err = run(t, "report", dir, "--what-if", "replicas", "--profile", prof, "--gpu-file", filepath.Join(tmp, "missing.yaml"))
	if !errors.As(err, &ee) || ee.Code != ExitUsage || !strings.Contains(err.Error(), "--gpu-file") {
		t.Errorf("a missing GPU file: %v, want exit 2 naming --gpu-file", err)
	}
}

// A closed-loop run is replayed as its closed loop (the same 8 workers,
// each resending as its answer ends), not as an open loop of the arrivals
// its latencies made: the twin's baseline is the run (the same engine and
// lengths), and a remedy changes the loop's arrivals with its latencies.
// Before, what-if refused closed-loop runs.
func TestWhatIfClosedLoopStaysClosed(t *testing.T) {
	dir := simulated(t, "--concurrency", "8", "--requests", "96", "--warmup", "8", "--input-tokens", "uniform:500-1500", "--output-tokens", "uniform:20-60")
	rep := whatIfJSON(t, dir, "--slo", "ttft:p50<=42ms", "--what-if", "replicas")
	w := rep.WhatIf
	if w == nil || !strings.Contains(w.Workload, "closed loop of 8 workers") {
		t.Fatalf("what-if %+v; notes %v", w, rep.Notes)
	}
	if b, m := value(w.Baseline.ValuesMS, 0), w.MeasuredMS[0]; math.Abs(b-m) > 0.03*m {
		t.Errorf("the twin's baseline TTFT P50 %.1f ms, the run's %.1f ms: the same engine and closed loop should agree within 3 %%", b, m)
	}
	// One replica: TTFT P50 45 ms; two share the 8 workers: about 41 ms.
	if !slices.ContainsFunc(w.Remedies, func(r prediction.Remedy) bool {
		return r.Setting == "replicas: 1 → 2" && r.Error == "" && r.After.Meets
	}) {
		t.Errorf("the replicas the SLO needs: %+v", w.Remedies)
	}
	if w.Baseline.GoodputRPS != 0 {
		t.Errorf("a closed loop's goodput %.3g req/s was searched by rate", w.Baseline.GoodputRPS)
	}
}

// bench's what-if line never names a remedy outside the twin's envelope as
// the top one: the best inside, or none ranked.
func TestTopRemedySkipsOutside(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	out := &prediction.Interval{TTFT: 5.5, Outside: true}
	outside := prediction.Remedy{Lever: "max-num-seqs", Title: "more sequences", Effect: f(0.1), Interval80: out,
		Extrapolates: []string{"outside the twin's envelope: 12 KV-cache preemptions"}}
	inside := prediction.Remedy{Lever: "replicas", Title: "one more replica", Effect: f(0.5)}
	for _, tt := range []struct {
		name     string
		remedies []prediction.Remedy
		want     string
	}{
		{"one inside", []prediction.Remedy{outside, inside}, "top of 2 remedies: one more replica:"},
		{"none inside", []prediction.Remedy{outside}, "no remedy ranked: each that helps lies outside the twin's envelope"},
	} {
		p := &prediction.Predictions{Basis: "the run's engine", Objectives: []string{"ttft:p99"},
			Interval80: &prediction.Interval{TTFT: 0.1}, Remedies: tt.remedies}
		if got := topRemedy(p, "tokentrace report R"); !strings.Contains(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}
