package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/serve"
)

// serveFlags binds serve's groups on a fresh FlagSet, as the command does.
func serveFlags(prefix string) (*pflag.FlagSet, *flagGroup, *serve.Options, *listenAddr) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := serve.DefaultOptions()
	l := &listenAddr{Host: "127.0.0.1", Port: 8000}
	g := newFlagGroup(fs, prefix, "")
	bindEngineFlags(g, &o.Engine)
	bindServerFlags(g, &o)
	if prefix == "" {
		bindRoleFlags(g, &o)
	}
	bindListenFlags(g, l)
	return fs, g, &o, l
}

// parseServe parses args into serve's options and runs the finish hooks.
func parseServe(t *testing.T, prefix string, args ...string) (serve.Options, listenAddr, *flagGroup) {
	t.Helper()
	fs, g, o, l := serveFlags(prefix)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	if err := g.finish(); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return *o, *l, g
}

// Every old spelling sets what its canonical flag sets, counts as given,
// and is hidden from help.
func TestOldSpellingsSetTheSameSetting(t *testing.T) {
	for _, prefix := range []string{"", "sim-"} {
		for _, tt := range []struct {
			old, canonical []string
			field          string
		}{
			{[]string{"--tp", "2"}, []string{"--tensor-parallel-size", "2"}, "tensor_parallel_size"},
			{[]string{"--kv-dtype", "fp8"}, []string{"--kv-cache-dtype", "fp8"}, "kv_cache_dtype"},
			{[]string{"--mem-util", "0.8"}, []string{"--gpu-memory-utilization", "0.8"}, "gpu_memory_utilization"},
			{[]string{"--spec-k", "3"}, []string{"--speculative-k", "3"}, "speculative_k"},
			{[]string{"--spec-alpha", "0.6"}, []string{"--speculative-alpha", "0.6"}, "speculative_alpha"},
			{[]string{"--output-dist", "uniform", "--output-min", "3", "--output-max", "9"}, []string{"--natural-output-tokens", "uniform:3-9"}, ""},
			{[]string{"--output-mean", "300"}, []string{"--natural-output-tokens", "lognormal:mean=300,sigma=1"}, ""},
			{[]string{"--output-dist", "lognormal", "--output-sigma", "0.5"}, []string{"--natural-output-tokens", "lognormal:mean=256,sigma=0.5"}, ""},
			{[]string{"--output-dist", "exponential", "--output-mean", "40"}, []string{"--natural-output-tokens", "exponential:mean=40"}, ""},
			{[]string{"--output-dist", "fixed", "--output-mean", "10"}, []string{"--natural-output-tokens", "10"}, ""},
			{[]string{"--output-dist", "max"}, []string{"--natural-output-tokens", "max"}, ""},
		} {
			with := func(args []string) []string {
				out := append([]string(nil), args...)
				for i := range out {
					if strings.HasPrefix(out[i], "--") {
						out[i] = "--" + prefix + out[i][2:]
					}
				}
				return out
			}
			a, _, g := parseServe(t, prefix, with(tt.old)...)
			b, _, _ := parseServe(t, prefix, with(tt.canonical)...)
			if diff := cmp.Diff(b, a); diff != "" {
				t.Errorf("%v and %v differ (-canonical +old):\n%s", with(tt.old), with(tt.canonical), diff)
			}
			if tt.field != "" && !g.given(tt.field) {
				t.Errorf("%v: %s not given", with(tt.old), tt.field)
			}
		}
	}
	// --natural-output-tokens wins over the old flags.
	o, _, _ := parseServe(t, "", "--output-dist", "uniform", "--natural-output-tokens", "max")
	if o.Engine.NaturalOutputTokens != "max" {
		t.Errorf("natural output tokens %q", o.Engine.NaturalOutputTokens)
	}
	// --addr sets --host and --port.
	_, l, _ := parseServe(t, "", "--addr", "0.0.0.0:9000")
	if l != (listenAddr{"0.0.0.0", 9000}) {
		t.Errorf("--addr: %+v", l)
	}
	out, err := run(t, "serve", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, hidden := range []string{"--tp ", "--kv-dtype", "--mem-util", "--spec-k", "--output-dist", "--output-mean", "--addr"} {
		if strings.Contains(out, hidden) {
			t.Errorf("serve --help shows %s", hidden)
		}
	}
	for _, shown := range []string{"--tensor-parallel-size", "--natural-output-tokens", "--host", "--port"} {
		if !strings.Contains(out, shown) {
			t.Errorf("serve --help lacks %s", shown)
		}
	}
}

// An unknown old --output-dist is an error naming the setting.
func TestOldOutputDistUnknown(t *testing.T) {
	fs, g, _, _ := serveFlags("")
	if err := fs.Parse([]string{"--output-dist", "zipf"}); err != nil {
		t.Fatal(err)
	}
	err := usageError(g.finish(), g)
	if err == nil || !strings.Contains(err.Error(), `--natural-output-tokens "zipf"`) || !strings.Contains(err.Error(), "--output-dist") {
		t.Errorf("err %v", err)
	}
}

// Commands print a one-line notice for a deprecated spelling and go on.
func TestDeprecatedSpellingsWarnAndWork(t *testing.T) {
	old, err := run(t, "estimate", "--mem-util", "0.8", "--input", "512", "--output", "64", "--tp", "1", "--spec-k", "2", "--spec-alpha", "0.5", "--kv-dtype", "fp8", "--batch", "1", "--json")
	if err != nil {
		t.Fatal(err)
	}
	canonical, err := run(t, "estimate", "--gpu-memory-utilization", "0.8", "--input-tokens", "512", "--output-tokens", "64", "--tensor-parallel-size", "1",
		"--speculative-k", "2", "--speculative-alpha", "0.5", "--kv-cache-dtype", "fp8", "--batch", "1", "--json")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"Flag --mem-util has been deprecated, use --gpu-memory-utilization", "Flag --input has been deprecated, use --input-tokens",
		"Flag --tp has been deprecated, use --tensor-parallel-size", "Flag --kv-dtype has been deprecated, use --kv-cache-dtype"} {
		if !strings.Contains(old, w) {
			t.Errorf("no notice %q in:\n%s", w, old)
		}
	}
	brace := strings.Index(old, "{")
	if brace < 0 {
		t.Fatalf("no JSON in:\n%s", old)
	}
	json := old[brace:]
	if json != canonical {
		t.Errorf("old and canonical spellings give different estimates")
	}
}

// TestConfigFileKeysAreFlags sets every flag of serve from a YAML file and
// checks the options equal those set from the command line.
func TestConfigFileKeysAreFlags(t *testing.T) {
	values := map[string]string{
		"model": "Qwen2.5-7B", "gpu": "A100-80GB-SXM", "tensor-parallel-size": "2", "dtype": "fp8", "kv-cache-dtype": "fp8",
		"gpu-memory-utilization": "0.8", "max-num-seqs": "64", "max-num-batched-tokens": "4096", "block-size": "32",
		"num-gpu-blocks-override": "900", "max-model-len": "4096", "max-waiting": "10", "queue-full-status": "503",
		"enable-prefix-caching": "true", "enable-chunked-prefill": "false", "speculative-k": "3", "speculative-alpha": "0.7",
		"draft-model": "Llama-3.1-8B", "scheduling-policy": "priority", "natural-output-tokens": "uniform:3-9",
		"seed": "11", "host": "0.0.0.0", "port": "9000",
		"served-model-name": "m", "max-body-bytes": "4096", "fault-seed": "5", "fault-429-rate": "0.1",
		"fault-500-rate": "0.05", "fault-503-rate": "0.02", "fault-400-rate": "0.01", "fault-slow-first-token-rate": "0.2",
		"fault-slow-first-token-delay": "3s", "fault-stall-rate": "0.3", "fault-stall-duration": "250ms",
		"fault-reset-rate": "0.04", "gpu-file": "gpus.yaml", "profile": "profile.yaml", "read-header-timeout": "5s", "body-timeout": "7s",
		"idle-timeout": "1m", "max-connections": "100", "engine": "trtllm", "reasoning-tokens": "uniform:10-20", "reasoning-field": "reasoning_content",
		"role": "decode", "kv-link": "tcp",
	}
	fsFlags, _, fromFlags, lFlags := serveFlags("")
	fsFile, _, fromFile, lFile := serveFlags("")
	var yaml strings.Builder
	fsFlags.VisitAll(func(f *pflag.Flag) {
		if f.Annotations[aliasOf] != nil {
			return
		}
		v, ok := values[f.Name]
		if !ok {
			t.Errorf("flag --%s has no test value", f.Name)
			return
		}
		if err := fsFlags.Set(f.Name, v); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&yaml, "%s: %q\n", strings.ReplaceAll(f.Name, "-", "_"), v)
	})
	path := filepath.Join(t.TempDir(), "serve.yaml")
	if err := os.WriteFile(path, []byte(yaml.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := applyConfigFile(path, fsFile, io.Discard); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(*fromFlags, *fromFile); diff != "" {
		t.Errorf("file and flags differ (-flags +file):\n%s", diff)
	}
	if *lFlags != *lFile || lFile.Port != 9000 {
		t.Errorf("listen address %+v from flags, %+v from the file", *lFlags, *lFile)
	}
	if fromFile.Faults.StallDuration != 250*time.Millisecond || !fromFile.Engine.EnablePrefixCaching || fromFile.Engine.EnableChunkedPrefill {
		t.Errorf("options %+v", *fromFile)
	}
}

// The command line wins over the file, whichever spelling either uses; a
// deprecated key is taken with a notice.
func TestCommandLineWinsOverFile(t *testing.T) {
	fs, _, o, _ := serveFlags("")
	if err := fs.Parse([]string{"--max-num-seqs", "7", "--tp", "2"}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("max-num-seqs: 99\ntensor_parallel_size: 4\nseed: 3\nfault-429-rate: 0.5\nmem-util: 0.7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var warn bytes.Buffer
	if err := applyConfigFile(path, fs, &warn); err != nil {
		t.Fatal(err)
	}
	e := o.Engine
	if e.MaxNumSeqs != 7 || e.TensorParallelSize != 2 || e.Seed != 3 || o.Faults.Rate429 != 0.5 || e.GPUMemoryUtilization != 0.7 {
		t.Errorf("max-num-seqs %d tp %d seed %d rate %g mem %g", e.MaxNumSeqs, e.TensorParallelSize, e.Seed, o.Faults.Rate429, e.GPUMemoryUtilization)
	}
	if !strings.Contains(warn.String(), `"mem-util" is deprecated, use --gpu-memory-utilization`) {
		t.Errorf("no notice for a deprecated key: %q", warn.String())
	}
}

// A domain package's field error comes out under the flag's name, with
// the group's prefix, and with exit status 2.
func TestFieldErrorsNameTheFlag(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"serve", "--block-size", "0"}, []string{"--block-size 0: must be at least 1"}},
		{[]string{"serve", "--max-num-batched-tokens", "32", "--enable-chunked-prefill=false", "--max-model-len", "64"}, []string{"--max-num-batched-tokens 32", "with --enable-chunked-prefill off", "--max-model-len"}},
		{[]string{"serve", "--fault-429-rate", "0.7", "--fault-500-rate", "0.7"}, []string{"--fault-429-rate", "--fault-500-rate", "sum to 1.4"}},
		{[]string{"serve", "--port", "70000"}, []string{"--port 70000: not a port"}},
		{[]string{"serve", "--natural-output-tokens", "lognormal:mean=0,sigma=1"}, []string{"--natural-output-tokens", "mean must be in"}},
		{[]string{"bench", "--output-dir", filepath.Join(dir, "a"), "--sim-block-size", "0"}, []string{"embedded engine", "--sim-block-size 0: must be at least 1"}},
		{[]string{"bench", "--output-dir", filepath.Join(dir, "b"), "--sim-tp", "-1"}, []string{"--sim-tensor-parallel-size -1"}},
		{[]string{"bench", "--output-dir", filepath.Join(dir, "c"), "--prefix-tokens", "5", "--prefix-groups", "0"}, []string{"--prefix-groups 0: must be at least 1"}},
		{[]string{"bench", "--output-dir", filepath.Join(dir, "d"), "--trace", "x.csv", "--rate", "5"}, []string{"--trace: sets the arrival times; leave out --rate (use --time-scale)"}},
		{[]string{"bench", "--output-dir", filepath.Join(dir, "e"), "--trace", writeFile(t, dir, "az.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,3\n"), "--trace-model", "GPT-4"}, []string{"--trace-model: ", "an Azure trace has no model column"}},
		{[]string{"simulate", "--trace", writeFile(t, dir, "x.txt", "time,in,out\n1,2,3\n"), "--requests", "1"}, []string{"--trace: ", "BurstGPT CSV (columns Timestamp,Model,Request tokens", "Mooncake JSON lines"}},
		{[]string{"plan", "--trace", writeFile(t, dir, "m.jsonl", `{"timestamp": 0, "input_length": 8, "output_length": 1}`+"\n"), "--trace-block-size", "-1"}, []string{"--trace-block-size -1: must be positive"}},
		{[]string{"gateway", "--upstream", "http://127.0.0.1:1", "--config", "x.yaml"}, []string{"--config: give either --config or --upstream"}},
		{[]string{"gateway", "--port", "-1"}, []string{"--port -1"}},
		{[]string{"estimate", "--batch", "0"}, []string{`--batch "0"`}},
	} {
		_, err := run(t, tt.args...)
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Code != ExitUsage {
			t.Errorf("%v: err %v, want exit status 2", tt.args, err)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %q lacks %q", tt.args, err, w)
			}
		}
	}
}

// One exit-status convention: 2 for anything wrong with the command line
// or its input, before anything runs.
func TestExitStatusOfBadUsage(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"frobnicate"},
		{"bench", "extra"},
		{"serve", "--no-such-flag"},
		{"report"},
		{"report", filepath.Join(dir, "missing")},
		{"report", dir, "--slo", "ttft:p99>1s"},
		{"report", dir, "--format", "pdf"},
		{"report", "--compare", dir},
		{"gateway"},
		{"gateway", "hash-key"},
		{"estimate", "--model", "no-such-model"},
	} {
		root := NewRoot()
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		root.SetArgs(args)
		var stderr bytes.Buffer
		if code := exitStatus(root, root.Execute(), &stderr); code != ExitUsage {
			t.Errorf("%v: exit status %d (%s), want 2", args, code, strings.TrimSpace(stderr.String()))
		}
	}
	root := NewRoot()
	root.SetOut(io.Discard)
	root.SetArgs([]string{"version"})
	if code := exitStatus(root, root.Execute(), io.Discard); code != ExitOK {
		t.Errorf("version: exit status %d", code)
	}
}

// writeRun writes a requests.jsonl of n requests with a 100 ms TTFT.
func writeRun(t *testing.T, dir string, n int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for i := range n {
		at := int64(i) * 1e8
		r := latency.Record{Schema: latency.RecordSchema, ID: fmt.Sprint("r", i), Stream: true, IntendedNS: at, SentNS: at,
			FirstTokenNS: at + 1e8, EndNS: at + 2e8, ChunkNS: []int64{at + 1e8, at + 15e7, at + 2e8}, ChunkTokens: []int32{1, 1, 1},
			InputTokens: 10, OutputTokens: 3, Status: 200}
		line, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(filepath.Join(dir, results.RequestsFile), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// report exits 3 when an SLO given with --slo fails, as bench does, and
// writes the report all the same; --output/-o names the file.
func TestReportExitStatus(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	writeRun(t, dir, 30)
	out, err := run(t, "report", dir, "--slo", "ttft:p99<=10ms", "--format", "json")
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != ExitSLOFailed || !strings.Contains(out, `"status": "fail"`) {
		t.Fatalf("failed SLO: err %v\n%s", err, out)
	}
	if _, err := run(t, "report", dir, "--slo", "ttft:p99<=1s"); err != nil {
		t.Fatalf("SLO that holds: %v", err)
	}
	file := filepath.Join(dir, "r.md")
	out, err = run(t, "report", dir, "-f", "md", "-o", file)
	if err != nil || !strings.Contains(out, "report written to "+file) {
		t.Fatalf("-o: %v %q", err, out)
	}
	if b, err := os.ReadFile(file); err != nil || !bytes.Contains(b, []byte("tokentrace report")) {
		t.Errorf("%s: %v", file, err)
	}
	out, err = run(t, "report", dir, "--format", "html")
	if want := filepath.Join(dir, "report.html"); err != nil || !strings.Contains(out, want) {
		t.Errorf("html: %v %q, want the path %s", err, out, want)
	}
	if _, err := run(t, "report", dir, "-o", filepath.Join(dir, "no", "such", "dir", "r.txt")); err == nil || errors.As(err, &ee) {
		t.Errorf("unwritable output: %v, want a plain failure (exit status 1)", err)
	}
}

// A config file that does not parse is named with the line, column and
// problem only: the YAML library's own error quotes the lines around the
// problem, which may hold a credential.
func TestConfigFileErrorQuotesNoSecret(t *testing.T) {
	for _, doc := range []string{
		"model: Llama-3.1-8B\n# upstream http://admin:pw-secret-42@10.0.0.1 api_key: sk-secret-123\nport: [8000\n",
		"served_model_name: m\napi_key: sk-secret-123\nport: [8000\n",
	} {
		path := filepath.Join(t.TempDir(), "serve.yaml")
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		fs, _, _, _ := serveFlags("")
		err := applyConfigFile(path, fs, io.Discard)
		if err == nil {
			t.Fatalf("%q: no error", doc)
		}
		for _, secret := range []string{"sk-secret-123", "pw-secret-42", "admin"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q quotes %q", err, secret)
			}
		}
		if !strings.Contains(err.Error(), "[3:") {
			t.Errorf("error %q does not name the line", err)
		}
	}
}

// writeFile writes content to dir/name and returns the path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// report prints, under its text, the compatibility views computed from the
// records, for a results folder, a bare records file and each side of
// --compare alike: a reasoning model's TTFT as vLLM and AIPerf print it
// beside AIPerf's time to first answer token. Each request: a role chunk at
// 5 ms, reasoning at 10 ms, the answer's three tokens at 100, 150 and
// 200 ms.
func TestReportPrintsCompatViews(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for i := range 10 {
		at := int64(i) * 1e9
		r := latency.Record{Schema: latency.RecordSchema, ID: fmt.Sprint("r", i), Stream: true, IntendedNS: at, SentNS: at,
			OtherNS: []int64{at + 5e6, at + 10e6}, FirstReasonNS: at + 10e6, ReasoningTokens: 1,
			FirstTokenNS: at + 1e8, EndNS: at + 2e8, ChunkNS: []int64{at + 1e8, at + 15e7, at + 2e8}, ChunkTokens: []int32{1, 1, 1},
			InputTokens: 10, OutputTokens: 3, Status: 200}
		line, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	records := filepath.Join(dir, results.RequestsFile)
	if err := os.WriteFile(records, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	// vLLM: TTFT 5; TPOT (200 − 5) / (4 − 1) = 65; ITL 5, 90, 50, 50.
	// AIPerf: TTFT 10, TTFO 100; ITL (200 − 10) / 3 = 63.33; ICL 50, 50.
	// guidellm: TPOT (200 − 100) / 3 = 33.33.
	views := "vLLM TTFT/TPOT/ITL P50 5.00/65.00/50.00 ms · AIPerf ITL/ICL P50 63.33/50.00 ms · guidellm TPOT P50 33.33 ms"
	reasoning := "reasoning: TTFT P50 as vLLM prints it 5.00 ms (first choice event), as AIPerf 10.00 ms (first reasoning or content); time to first answer token: AIPerf TTFO 100.00 ms"
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{dir}, []string{"compat    " + views, "compat    " + reasoning}},
		{[]string{records}, []string{"compat    " + views, "compat    " + reasoning}},
		{[]string{"--compare", dir, records}, []string{
			"vLLM TTFT                        5.00ms    5.00ms\nvLLM TPOT                       65.00ms   65.00ms\n",
			"AIPerf TTFT                     10.00ms   10.00ms\nAIPerf TTFO                    100.00ms  100.00ms\n",
			"guidellm TPOT                   33.33ms   33.33ms\n"}},
	} {
		out, err := run(t, append([]string{"report"}, tt.args...)...)
		if err != nil {
			t.Fatalf("report %v: %v", tt.args, err)
		}
		for _, want := range tt.want {
			if !strings.Contains(out, want) {
				t.Errorf("report %v lacks %q:\n%s", tt.args, want, out)
			}
		}
	}
	if out, _ := run(t, "report", dir, "--format", "json"); strings.Contains(out, "compat ") {
		t.Errorf("a JSON report has the console's compat lines")
	}
}
