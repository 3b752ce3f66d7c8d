package cli

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/results"
)

func TestSimulateBadInputExits2AndWritesNothing(t *testing.T) {
	dir := t.TempDir()
	noCols := filepath.Join(dir, "nocols.csv")
	if err := os.WriteFile(noCols, []byte("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,374\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	held := filepath.Join(dir, "held")
	if err := os.MkdirAll(held, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(held, "requests.jsonl"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--trace", noCols}, "GeneratedTokens"},
		{[]string{"--trace", filepath.Join(dir, "missing.csv")}, "--trace"},
		{[]string{"--replicas", "0"}, "--replicas 0"},
		{[]string{"--balancer", "fastest"}, "--balancer"},
		{[]string{"--length-pools", "2048"}, "--length-pools"},
		{[]string{"--length-pools", "2048:2,*:2", "--replicas", "3"}, "--replicas"},
		{[]string{"--network-latency", "-1ms"}, "--network-latency"},
		{[]string{"--queue-adaptive", "gradient"}, "--queue-adaptive"},
		{[]string{"--queue-adaptive", "aimd", "--queue-concurrency", "4"}, "--queue-adaptive"},
		{[]string{"--early-reject"}, "--early-reject"},
		{[]string{"--deadline-ttft", "1s"}, "--queue-concurrency"},
		{[]string{"--model", "no-such-model"}, "--model"},
		{[]string{"--rate", "0"}, "--rate 0"},
		{[]string{"--input-tokens", "zipf:2"}, "unknown distribution"},
		{[]string{"--endpoint", "embeddings"}, "--endpoint"},
		{[]string{"--slo", "ttft:p99>1s"}, "--slo"},
		{[]string{"--queue-full-status", "500"}, "--queue-full-status"},
		{[]string{"--no-such-flag"}, "unknown flag"},
		{[]string{"--engine", "tgi"}, "--engine"},
	} {
		out := filepath.Join(dir, "x")
		_, err := run(t, append([]string{"simulate", "--output-dir", out}, tt.args...)...)
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Code != ExitUsage || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err %v, want exit status 2 mentioning %q", tt.args, err, tt.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%v: a results folder was written for a run that never started", tt.args)
		}
	}
	_, err := run(t, "simulate", "--output-dir", held, "--requests", "5")
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != ExitUsage || !strings.Contains(err.Error(), "already holds a run") || !strings.Contains(err.Error(), "--output-dir") {
		t.Errorf("a folder holding a run: err %v", err)
	}
	if st, _ := os.Stat(filepath.Join(held, "requests.jsonl")); st.Size() != 0 {
		t.Error("the earlier run's records were overwritten")
	}
}

// simulate writes bench's results folder: report reads it, alone and
// compared with another, and the SLO exit status is bench's.
func TestSimulateFolderIsReadByReport(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	out, err := run(t, "simulate", "--output-dir", a, "--rate", "20", "--requests", "300", "--steps")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "simulated: 1 replica") || !strings.Contains(out, "300 succeeded") {
		t.Errorf("summary:\n%s", out)
	}
	for _, f := range []string{"requests.jsonl", "summary.json", "run.json", "command.txt", "config.json", "steps.jsonl"} {
		if _, err := os.Stat(filepath.Join(a, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	info, ok, err := results.ReadRunInfo(a)
	if err != nil || !ok || !info.Simulated || info.Mode != "open" || len(info.Samples) == 0 {
		t.Errorf("run.json: %+v, %v, %v", info, ok, err)
	}
	out, err = run(t, "simulate", "--output-dir", b, "--rate", "20", "--requests", "300", "--replicas", "2",
		"--balancer", "round_robin", "--slo", "ttft:p99<=1ms")
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != ExitSLOFailed {
		t.Fatalf("a failed SLO: err %v\n%s", err, out)
	}
	var sum struct {
		Simulated bool `json:"simulated"`
		Replicas  []struct {
			Requests int `json:"requests"`
		} `json:"replicas"`
		Records int `json:"records"`
	}
	raw, _ := os.ReadFile(filepath.Join(b, "summary.json"))
	if err := json.Unmarshal(raw, &sum); err != nil || !sum.Simulated || len(sum.Replicas) != 2 || sum.Replicas[0].Requests != 150 || sum.Records != 300 {
		t.Errorf("summary.json: %+v, %v", sum, err)
	}

	out, err = run(t, "report", a, "--format", "json")
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	var rep report.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Summary.Succeeded != 300 || len(rep.Runs) != 1 || !rep.Runs[0].Simulated {
		t.Errorf("report JSON: %v, %+v", err, rep.Summary)
	}
	out, err = run(t, "report", "--compare", a, b)
	if err != nil || !strings.Contains(out, "ttft") || !strings.Contains(out, "B − A") {
		t.Errorf("report --compare: %v\n%s", err, out)
	}
}

// --engine fills the settings not given with the family's defaults, and
// the run records them (what-if re-simulates the run as it ran).
func TestSimulateEngineFamily(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want map[string]string
	}{
		{[]string{"--engine", "trtllm"}, map[string]string{"engine": "trtllm", "max-num-batched-tokens": "8192", "max-num-seqs": "2048",
			"enable-chunked-prefill": "false", "enable-prefix-caching": "true"}},
		{[]string{"--engine", "trtllm@0.21"}, map[string]string{"engine": "trtllm@0.21", "max-num-seqs": "256"}},
		// a reasoning workload: only the prompt must fit TensorRT-LLM's step
		{[]string{"--engine", "trtllm", "--concurrency", "64", "--requests", "64", "--input-tokens", "1024", "--output-tokens", "8192"},
			map[string]string{"max-num-batched-tokens": "8192", "max-model-len": "0"}},
		{[]string{"--engine", "TensorRT-LLM", "--max-num-seqs", "8", "--enable-chunked-prefill"}, map[string]string{"max-num-batched-tokens": "8192",
			"max-num-seqs": "8", "enable-chunked-prefill": "true"}},
		{[]string{"--engine", "sglang", "--gpu", "L4"}, map[string]string{"max-num-batched-tokens": "2048", "max-num-seqs": "0", "enable-prefix-caching": "true"}},
		{nil, map[string]string{"engine": "", "max-num-batched-tokens": "0", "enable-prefix-caching": "false", "enable-chunked-prefill": "true"}},
	} {
		out := filepath.Join(dir, strings.Join(c.args, "_"))
		if _, err := run(t, append([]string{"simulate", "--requests", "4", "--concurrency", "2", "--input-tokens", "64", "--output-tokens", "4", "--output-dir", out}, c.args...)...); err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		cfg, err := results.ReadConfig(out)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range c.want {
			if cfg[k] != v {
				t.Errorf("%v: config %s = %q, want %q", c.args, k, cfg[k], v)
			}
		}
	}
}

// A simulation outside what its constants were fitted on says so: in its
// output, its summary and the report of its folder, and its 80 % interval
// is the cross-source one, marked; inside, it is the constants' own.
func TestSimulateFlagsTheEnvelope(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	out, err := run(t, "simulate", "--engine", "trtllm", "--concurrency", "64", "--requests", "64", "--input-tokens", "1024",
		"--output-tokens", "8192", "--output-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"outside the twin's envelope: outputs of 8192 tokens: fitted on 200–2000",
		"outside the twin's envelope: TensorRT-LLM 1.0: the constants were fitted on release 0.x",
		"interval  80 %: TTFT ±549%, TPOT ±15%, E2E ±16% (outside the envelope: P80 of |error| across sources"} {
		if !strings.Contains(out, want) {
			t.Errorf("simulate's output lacks %q:\n%s", want, out)
		}
	}
	in, err := run(t, "simulate", "--engine", "trtllm@0.x", "--concurrency", "8", "--requests", "16", "--input-tokens", "1000",
		"--output-tokens", "200", "--output-dir", filepath.Join(t.TempDir(), "inside"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "interval  80 %: TTFT ±31%, TPOT ±10%, E2E ±9% (P85 of |error| on the fit half"; !strings.Contains(in, want) || strings.Contains(in, "outside the twin's envelope") {
		t.Errorf("simulate inside the envelope: want %q and no flag:\n%s", want, in)
	}
	rep, err := run(t, "report", dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep, "twin: outside the twin's envelope: outputs of 8192") || strings.Contains(rep, "load generator doubted") {
		t.Errorf("report: the envelope flags should be the twin's, not the load generator's doubts:\n%s", rep)
	}
}
