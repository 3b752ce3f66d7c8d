package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// The -update flag rewrites golden files. Several test files of this
// package may want it, so it is registered once, by whichever comes first.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite golden files")
	}
}

func updateGolden() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if updateGolden() {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got):\n%s", name, diff)
	}
}

var decimalMemory = regexp.MustCompile(`[0-9] [GMk]B\b(?:[^/]|$)`)

func TestEstimateGolden(t *testing.T) {
	tests := []struct {
		file string
		args []string
	}{
		{"estimate_default.golden", []string{"estimate"}},
		{"estimate_explain_llama2_70b.golden", []string{"estimate", "--model", "Llama-2-70B", "--gpu", "A100-80GB-SXM", "--dtype", "fp16", "--roofline", "--input-tokens", "512", "--output-tokens", "128", "--batch", "1", "--explain"}},
		{"estimate_spec.golden", []string{"estimate", "--model", "Llama-3.1-70B", "--gpu", "H100-SXM", "--tensor-parallel-size", "4", "--draft-model", "Llama-3.1-8B", "--speculative-k", "4", "--speculative-alpha", "0.8", "--batch", "1,16,64,256"}},
		{"estimate_moe_fp8.golden", []string{"estimate", "--model", "Mixtral-8x7B", "--gpu", "H200", "--dtype", "fp8", "--kv-cache-dtype", "fp8", "--batch", "1,64"}},
		{"estimate_json.golden", []string{"estimate", "--model", "../perfmodel/testdata/configs/llama-3.1-8b.json", "--batch", "1,32", "--input-tokens", "512", "--output-tokens", "64", "--json"}},
		{"estimate_list.golden", []string{"estimate", "--list"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			out, err := run(t, tt.args...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			golden(t, tt.file, out)
			// Memory in GiB throughout (the catalog's unit); GB only as
			// bandwidth's GB/s.
			if m := decimalMemory.FindString(out); m != "" && !strings.HasSuffix(tt.file, "json.golden") {
				t.Errorf("memory in decimal units: %q", m)
			}
		})
	}
}

func TestEstimateJSONShape(t *testing.T) {
	out, err := run(t, "estimate", "--batch", "1,8", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		TP              int   `json:"tp"`
		KVBytesPerToken int64 `json:"kv_bytes_per_token"`
		Rows            []struct {
			Batch  int     `json:"batch"`
			TTFTMS float64 `json:"ttft_ms"`
			TPOTMS float64 `json:"tpot_ms"`
			E2EMS  float64 `json:"e2e_ms"`
			Bound  string  `json:"bound"`
		} `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.TP != 1 || got.KVBytesPerToken != 131072 || len(got.Rows) != 2 || got.Rows[1].Batch != 8 {
		t.Fatalf("%+v", got)
	}
	for _, r := range got.Rows {
		if !(r.TTFTMS > 0 && r.TPOTMS > 0 && r.E2EMS > r.TTFTMS) || r.Bound == "" {
			t.Errorf("row %+v", r)
		}
	}
}

func TestEstimateBadInput(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"--model", "llama-3.1-7b"}, []string{`unknown model "llama-3.1-7b"`, `did you mean "Llama-3.1-8B"`, "Mixtral-8x7B"}},
		{[]string{"--gpu", "H100-SMX"}, []string{`unknown GPU "H100-SMX"`, `did you mean "H100-SXM"`, "MI300X"}},
		{[]string{"--model", "Llama-2-70B", "--gpu", "A100-80GB-SXM", "--dtype", "fp16", "--tp", "1"}, []string{"does not fit", "weights 128.5 GiB > usable", "smallest TP that fits: 2"}},
		{[]string{"--model", "testdata/missing-config.json"}, []string{"model config", "missing-config.json"}},
		{[]string{"--input-tokens", "0"}, []string{"--input-tokens 0: input length must be > 0"}},
		{[]string{"--output-tokens", "-3"}, []string{"--output-tokens -3: output length must be > 0"}},
		{[]string{"--batch", "1,x"}, []string{`--batch "x"`}},
		{[]string{"--batch", "0"}, []string{`--batch "0"`}},
		{[]string{"--spec-k", "4", "--spec-alpha", "1"}, []string{"α must be in [0, 1)"}},
		{[]string{"--spec-k", "4", "--spec-alpha", "-0.2"}, []string{"α must be in [0, 1)"}},
		{[]string{"--spec-k", "-1"}, []string{"draft length k must be in [1, 64]"}},
		{[]string{"--speculative-alpha", "0.5"}, []string{"--speculative-alpha: needs --speculative-k"}},
		{[]string{"--dtype", "fp4"}, []string{"--dtype", `unknown dtype "fp4"`}},
		{[]string{"--kv-cache-dtype", "int4"}, []string{"--kv-cache-dtype", "not a KV-cache precision"}},
		{[]string{"--gpu-memory-utilization", "1.5"}, []string{"--gpu-memory-utilization 1.5: must be in (0, 1]"}},
		{[]string{"--gpu-memory-utilization", "0"}, []string{"--gpu-memory-utilization 0: must be in (0, 1]"}},
		{[]string{"--tensor-parallel-size", "-1"}, []string{"--tensor-parallel-size -1", "0 for the smallest"}},
		{[]string{"--eff-memory", "0"}, []string{"efficiency memory must be in (0, 1]"}},
		{[]string{"--tp", "3"}, []string{"tp 3 must divide the 32 attention heads"}},
		{[]string{"--gpu-file", "testdata/missing.yaml"}, []string{"GPU file"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, err := run(t, append([]string{"estimate"}, tt.args...)...)
			if err == nil {
				t.Fatalf("accepted; output:\n%s", out)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(out, "NaN") || strings.Contains(err.Error(), "NaN") {
				t.Errorf("NaN in output")
			}
		})
	}
}

func TestEstimateGPUFileOverride(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gpus.yaml")
	yaml := `- name: H100-SXM
  family: hopper
  memory_gib: 80
  hbm_gb_s: 1675
  bf16_tflops: 989.4
  fp8_tflops: 1978.9
  interconnect_gb_s: 450
  source: "test: half the bandwidth"
- name: Test-GPU
  memory_gib: 48
  hbm_gb_s: 1000
  bf16_tflops: 200
  interconnect_gb_s: 32
  source: test
`
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	base, err := run(t, "estimate", "--batch", "1", "--json")
	if err != nil {
		t.Fatal(err)
	}
	slow, err := run(t, "estimate", "--batch", "1", "--json", "--gpu-file", path)
	if err != nil {
		t.Fatal(err)
	}
	tpot := func(s string) float64 {
		var r struct {
			Rows []struct {
				TPOT float64 `json:"tpot_ms"`
			} `json:"rows"`
		}
		if err := json.Unmarshal([]byte(s), &r); err != nil {
			t.Fatal(err)
		}
		return r.Rows[0].TPOT
	}
	if !(tpot(slow) > 1.5*tpot(base)) {
		t.Errorf("halved bandwidth: TPOT %.2f vs %.2f", tpot(slow), tpot(base))
	}
	if _, err := run(t, "estimate", "--gpu", "test-gpu", "--gpu-file", path, "--batch", "1"); err != nil {
		t.Errorf("added GPU: %v", err)
	}
	if err := os.WriteFile(path, []byte("- name: X\n  memory_gib: 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "estimate", "--gpu-file", path); err == nil || !strings.Contains(err.Error(), "memory_gib must be > 0") {
		t.Errorf("bad GPU file: %v", err)
	}
}

// TestEstimatePrices: --prices replaces a GPU's price (the cost line and
// the JSON follow it); a price file naming an unknown GPU is bad input
// (exit 2) naming the flag and the GPU.
func TestEstimatePrices(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte("prices:\n  - gpu: H100-SXM\n    usd_per_gpu_hour: 10\n    basis: test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("prices:\n  - gpu: Q100\n    usd_per_gpu_hour: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "estimate", "--prices", good, "--tensor-parallel-size", "2")
	if err != nil || !strings.Contains(out, "cost: $20.00 per hour (2 × $10 per GPU-hour: test") {
		t.Errorf("--prices: %v\n%s", err, out)
	}
	root := NewRoot()
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"estimate", "--prices", bad})
	var stderr bytes.Buffer
	if code := exitStatus(root, root.Execute(), &stderr); code != ExitUsage ||
		!strings.Contains(stderr.String(), "--prices") || !strings.Contains(stderr.String(), `"Q100"`) {
		t.Errorf("unknown GPU: exit %d: %s", code, stderr.String())
	}
}

// estimate --engine prices steps with the family's constants for the GPU
// and weights; an --eff-* flag still wins over them.
func TestEstimateEngineFamily(t *testing.T) {
	fam, err := engine.LookupFamily("trtllm")
	if err != nil {
		t.Fatal(err)
	}
	want, ok := fam.ConstantsFor("H100-SXM", perfmodel.FP8)
	if !ok {
		t.Fatal("trtllm ships no FP8 constants for the H100")
	}
	for _, c := range []struct {
		args        []string
		compute     float64
		contextNS   float64
		stepOverhUS float64
	}{
		{[]string{"--engine", "trtllm", "--dtype", "fp8"}, want.Compute, want.ContextOverheadNS, float64(want.StepOverhead) / 1e3},
		{[]string{"--engine", "trtllm", "--dtype", "fp8", "--eff-compute", "0.4"}, 0.4, want.ContextOverheadNS, float64(want.StepOverhead) / 1e3},
	} {
		out, err := run(t, append([]string{"estimate", "--gpu", "H100-SXM", "--input-tokens", "512", "--output-tokens", "64", "--batch", "8", "--json"}, c.args...)...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", c.args, err, out)
		}
		var got struct {
			Efficiency struct {
				Compute           float64 `json:"compute"`
				StepOverheadUS    float64 `json:"step_overhead_us"`
				ContextOverheadNS float64 `json:"context_overhead_ns"`
			} `json:"efficiency"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%v: %v\n%s", c.args, err, out)
		}
		e := got.Efficiency
		if e.Compute != c.compute || e.ContextOverheadNS != c.contextNS || math.Abs(e.StepOverheadUS-c.stepOverhUS) > 1e-3 {
			t.Errorf("%v: efficiency %+v, want compute %g, context %g ns, step %g µs", c.args, e, c.compute, c.contextNS, c.stepOverhUS)
		}
	}
}
