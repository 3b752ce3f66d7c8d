package cli

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// planArgs is a CI-sized plan: one GPU, one or two replicas.
var planArgs = []string{"plan", "--input-tokens", "1000", "--output-tokens", "50", "--requests", "100",
	"--vary", "gpu=H100-SXM", "--vary", "replicas=1-2"}

// TestPlanAnswersAndWritesHTML: a plan that one replica cannot serve
// answers two, lists the cheaper one's miss, and writes its HTML page; on
// the GPU family's defaults its answer is flagged and carries the
// cross-source 80 % interval.
func TestPlanAnswersAndWritesHTML(t *testing.T) {
	page := filepath.Join(t.TempDir(), "plan.html")
	out, err := run(t, append(planArgs, "--rate", "40", "--slo", "ttft:p99<=1s", "-o", page)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"answer   #2 2 × H100-SXM", "cheaper  #1 1 × H100-SXM", "Pareto front", "$/1M out", "report written to " + page,
		"outside the twin's envelope: the GPU family's default constants: not fitted", "interval 80 %: TTFT ±549%, TPOT ±15%, E2E ±16% (outside the envelope"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	b, err := os.ReadFile(page)
	if err != nil || !bytes.Contains(b, []byte("<svg")) || !bytes.Contains(b, []byte("Pareto front")) || bytes.Contains(b, []byte(`src="http`)) || bytes.Contains(b, []byte(`href="http`)) {
		t.Errorf("HTML page: %v (%d bytes)", err, len(b))
	}
	// The page's answer carries the same interval and flag as the text.
	for _, want := range []string{`<div class="interval outside">interval 80 %: TTFT ±549%, TPOT ±15%, E2E ±16% (outside the envelope`,
		`<span class="mark">outside the twin's envelope</span>`,
		`<li>outside the twin's envelope: the GPU family&#39;s default constants: not fitted`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("HTML page lacks %q", want)
		}
	}
}

// TestPlanExitStatuses: no configuration meeting the SLOs is exit status 4
// naming the closest and by how much it misses; bad input is 2, each named.
func TestPlanExitStatuses(t *testing.T) {
	exit := func(args ...string) (int, string) {
		root := NewRoot()
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		root.SetArgs(args)
		var stderr bytes.Buffer
		return exitStatus(root, root.Execute(), &stderr), stderr.String()
	}
	code, msg := exit(append(planArgs, "--rate", "10", "--slo", "ttft:p99<=2ms")...)
	if code != ExitNoneMeets || !strings.Contains(msg, "no configuration meets the SLOs") || !strings.Contains(msg, "#1 1 × H100-SXM") {
		t.Errorf("impossible SLO: exit %d: %s", code, msg)
	}
	dir := t.TempDir()
	prices := filepath.Join(dir, "prices.yaml")
	if err := os.WriteFile(prices, []byte("prices:\n  - gpu: X9\n    usd_per_gpu_hour: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	closed := filepath.Join(dir, "closed")
	if _, err := run(t, "simulate", "--concurrency", "4", "--requests", "20", "--output-dir", closed); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append(planArgs, "--rate", "10", "--slo", "ttft:p99<=1s", "--prices", prices), `--prices`},
		{[]string{"plan", closed, "--slo", "ttft:p99<=1s"}, "closed-loop"},
		{[]string{"plan", filepath.Join(dir, "none"), "--slo", "ttft:p99<=1s"}, "none"},
		{append(planArgs, "--slo", "ttft:p99<=1s"), "--rate"},
		{append(planArgs, "--rate", "10"), "--slo"},
		{append(planArgs, "--rate", "10", "--slo", "ttft:p99<=1s", "--maximize", "latency"), "--maximize"},
		{append(planArgs, "--rate", "10", "--slo", "ttft:p99<=1s", "--budget", "5"), "--budget"},
		{append(planArgs, "--rate", "10", "--slo", "ttft:p99<=1s", "--vary", "colour=red"), "--vary"},
		{[]string{"plan", "--rate", "10", "--slo", "ttft:p99<=1s", "--vary", "gpu=Q1"}, `"Q1"`},
		{[]string{"plan", closed, "--input-tokens", "5", "--slo", "ttft:p99<=1s"}, "--input-tokens"},
		{append(planArgs, "--rate", "10", "--slo", "ttft:p99<=1s", "--replicas", "2"), "--replicas: --vary replicas=… sets"},
	} {
		if code, msg := exit(tc.args...); code != ExitUsage || !strings.Contains(msg, tc.want) {
			t.Errorf("%v: exit %d, want 2 naming %s: %s", tc.args[1:], code, tc.want, msg)
		}
	}
}

// TestPlanHonoursReplicas: --replicas N with a target rate plans N
// replicas (it used to be replaced by the roofline's counts, silently):
// every candidate has N, and the answer is N of them.
func TestPlanHonoursReplicas(t *testing.T) {
	out, err := run(t, "plan", "--input-tokens", "1000", "--output-tokens", "50", "--requests", "100",
		"--vary", "gpu=H100-SXM", "--replicas", "3", "--rate", "40", "--slo", "ttft:p99<=1s")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "answer   #1 3 × H100-SXM") {
		t.Errorf("the answer is not 3 replicas:\n%s", out)
	}
	for _, n := range []string{"1", "2", "4", "5"} {
		if strings.Contains(out, " "+n+" × H100-SXM") {
			t.Errorf("a candidate of %s replicas, not the 3 asked for:\n%s", n, out)
		}
	}
}

// TestPlanFromResultsFolder: a plan takes its workload from a results
// folder's records, and --rate rescales it.
func TestPlanFromResultsFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := run(t, "simulate", "--rate", "5", "--requests", "100", "--input-tokens", "500", "--output-tokens", "20", "--output-dir", dir); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "plan", dir, "--rate", "60", "--slo", "ttft:p99<=1s", "--vary", "gpu=H100-SXM", "--vary", "replicas=1-3")
	var ee *ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "at 60 req/s") || !strings.Contains(out, dir+": 100 requests replayed at their arrival times") {
		t.Errorf("output:\n%s", out)
	}
}

// Without --vary, a plan searches every priced GPU and the default
// precisions and prefix caching, less each dimension the user fixed with
// its own flag.
func TestPlanDefaultVaryKeepsGivenFlags(t *testing.T) {
	gpus := []string{"A100-80GB-SXM", "H100-SXM"}
	all := []string{"gpu=A100-80GB-SXM,H100-SXM", "dtype=bf16,fp8", "kv-cache-dtype=auto,fp8", "enable-prefix-caching=false,true"}
	for _, tc := range []struct {
		given []string
		want  []string
	}{
		{nil, all},
		{[]string{"gpu"}, all[1:]},
		{[]string{"dtype", "enable_prefix_caching"}, []string{all[0], all[2]}},
		{[]string{"gpu", "dtype", "kv_cache_dtype", "enable_prefix_caching"}, nil},
	} {
		given := func(f string) bool { return slices.Contains(tc.given, f) }
		if diff := cmp.Diff(tc.want, planDefaultVary(given, gpus)); diff != "" {
			t.Errorf("given %v (-want +got):\n%s", tc.given, diff)
		}
	}
}

// TestPlanHonoursGPUFlag: --gpu without --vary plans on that GPU only
// (every priced GPU used to be searched whatever --gpu said), and
// --tensor-parallel-size is kept.
func TestPlanHonoursGPUFlag(t *testing.T) {
	out, err := run(t, "plan", "--input-tokens", "1000", "--output-tokens", "50", "--requests", "100",
		"--gpu", "H100-SXM", "--tensor-parallel-size", "2", "--dtype", "bf16", "--kv-cache-dtype", "auto",
		"--enable-prefix-caching=false", "--rate", "10", "--slo", "ttft:p99<=1s")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "H100-SXM") {
		t.Fatalf("no H100-SXM candidate:\n%s", out)
	}
	for _, other := range []string{"A100", "H200", "L40S", "B200"} {
		if strings.Contains(out, other) {
			t.Errorf("a %s candidate though --gpu H100-SXM was given:\n%s", other, out)
		}
	}
	if strings.Contains(out, "TP1") || strings.Contains(out, "TP 1") || strings.Contains(out, "tp=1") {
		t.Errorf("a TP-1 candidate though --tensor-parallel-size 2 was given:\n%s", out)
	}
}
