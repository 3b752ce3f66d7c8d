package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/process"
)

// hostileInputs are inputs that once exhausted memory, crashed the Go
// runtime or were taken silently: huge lengths, rates and counts, endless
// and binary files, NaN, negative and zero values. Each must end with exit
// 2 and a sentence that names the input (want), and never with a runtime
// "fatal error" or a panic, under a 4 GiB address-space limit.
var hostileInputs = []struct {
	args []string
	want string
}{
	{[]string{"estimate", "--gpu-file", "/dev/zero"}, "--gpu-file"},
	{[]string{"estimate", "--prices", "/dev/zero"}, "--prices"},
	{[]string{"estimate", "--profile", "/dev/zero"}, "--profile"},
	{[]string{"estimate", "--model", "/dev/zero"}, "--model"},
	{[]string{"estimate", "--prices", "BINARY"}, "--prices"},
	{[]string{"estimate", "--gpu-file", "BINARY"}, "--gpu-file"},
	{[]string{"estimate", "--profile", "BINARY"}, "--profile"},
	{[]string{"estimate", "--input-tokens", "1073741824"}, "--input-tokens"},
	{[]string{"gateway", "--config", "/dev/zero"}, "/dev/zero"},
	{[]string{"gateway", "--config", "BINARY"}, "BINARY"},
	{[]string{"serve", "--config", "/dev/zero"}, "/dev/zero"},
	{[]string{"bench", "--trace", "HUGETRACE", "--url", "http://127.0.0.1:1"}, "--trace"},
	{[]string{"bench", "--input-tokens", "1073741824", "--url", "http://127.0.0.1:1"}, "--input-tokens"},
	{[]string{"bench", "--endpoint", "responses", "--input-tokens", "1073741824", "--url", "http://127.0.0.1:1"}, "--input-tokens"},
	{[]string{"bench", "--endpoint", "messages", "--trace", "HUGETRACE", "--url", "http://127.0.0.1:1"}, "--trace"},
	{[]string{"bench", "--endpoint", "ollama", "--output-tokens", "1073741824", "--url", "http://127.0.0.1:1"}, "--output-tokens"},
	{[]string{"bench", "--endpoint", "anthropic", "--url", "http://127.0.0.1:1"}, "--endpoint"},
	{[]string{"simulate", "--input-tokens", "1073741824", "--requests", "1"}, "--input-tokens"},
	{[]string{"simulate", "--rate", "1e6", "--duration", "1h"}, "--rate"},
	{[]string{"simulate", "--replicas", "1000000"}, "--replicas"},
	{[]string{"simulate", "--requests", "3000000", "--rate", "10"}, "--requests"},
	{[]string{"simulate", "--rate", "NaN", "--requests", "10"}, "--rate"},
	{[]string{"simulate", "--trace", "HUGETRACE"}, "--trace"},
	{[]string{"simulate", "--trace", "/dev/zero"}, "--trace"},
	{[]string{"plan", "--trace", "HUGETRACE", "--slo", "ttft:p99<=1s"}, "--trace"},
	{[]string{"plan", "--gpu-memory-utilization", "NaN", "--rate", "1", "--slo", "ttft:p99<=1s"}, "--gpu-memory-utilization"},
	{[]string{"plan", "--gpu-memory-utilization", "0", "--rate", "1", "--slo", "ttft:p99<=1s"}, "--gpu-memory-utilization"},
	{[]string{"plan", "--gpu-memory-utilization", "1e9", "--rate", "1", "--slo", "ttft:p99<=1s"}, "--gpu-memory-utilization"},
	{[]string{"plan", "--budget", "NaN", "--maximize", "throughput", "--slo", "ttft:p99<=1s"}, "--budget"},
	{[]string{"plan", "--replicas", "0", "--rate", "1", "--slo", "ttft:p99<=1s"}, "--replicas"},
	{[]string{"plan", "--replicas", "-3", "--rate", "1", "--slo", "ttft:p99<=1s"}, "--replicas"},
	{[]string{"calibrate", "--bootstrap", "-1", "RESULTS"}, "--bootstrap"},
	{[]string{"calibrate", "--num-gpu-blocks-override", "-5", "RESULTS"}, "--num-gpu-blocks-override"},
	{[]string{"app", "--upstream", "http://127.0.0.1:1", "--body-timeout", "-1s"}, "--body-timeout"},
	{[]string{"app", "--upstream", "http://127.0.0.1:1", "--max-connections", "-5"}, "--max-connections"},
	{[]string{"app", "--upstream", "http://127.0.0.1:1", "--max-response-bytes", "-1"}, "--max-response-bytes"},
	{[]string{"serve", "--body-timeout", "-1s"}, "--body-timeout"},
	{[]string{"bench", "--agent-sessions", "BIGRESULT", "--url", "http://127.0.0.1:1"}, "result_tokens"},
	{[]string{"bench", "--agent-sessions", "LONGTOOL", "--url", "http://127.0.0.1:1"}, "latency"},
	{[]string{"bench", "--agent-steps", "3", "--tool-latency", "100000h", "--url", "http://127.0.0.1:1"}, "--tool-latency"},
	{[]string{"plan", "--rate", "1e6", "--slo", "ttft:p99<=1s"}, "--rate"},
	{[]string{"plan", "--replicas", "1000000", "--maximize", "throughput", "--slo", "ttft:p99<=1s"}, "--replicas"},
	{[]string{"plan", "--rate", "3000", "--slo", "ttft:p99<=1s"}, "over the 100000000 one plan runs"},
}

// TestHostileInputs runs the built binary on every hostile input under
// `ulimit -v` 4 GiB (the tests' own memory use is not the binary's).
func TestHostileInputs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if runtime.GOOS != "linux" {
		t.Skip("ulimit -v and /dev/zero: linux")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "tokentrace")
	build := exec.Command("go", "build", "-o", bin, module+"/cmd/tokentrace")
	if out, err := process.CombinedOutput(build); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	binary := filepath.Join(dir, "binary.dat")
	blob := make([]byte, 4096)
	for i := range blob {
		blob[i] = byte(i * 7)
	}
	huge := filepath.Join(dir, "huge.csv")
	bigResult, longTool := filepath.Join(dir, "bigresult.jsonl"), filepath.Join(dir, "longtool.jsonl")
	results := filepath.Join(dir, "results")
	for _, f := range []struct {
		path string
		data []byte
	}{
		{binary, blob}, {huge, []byte("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,99999999999,10\n")},
		{bigResult, []byte(`{"steps": [{"input_tokens": 10, "output_tokens": 5}, {"output_tokens": 5, "tools": [{"result_tokens": 1073741824}]}]}` + "\n")},
		{longTool, []byte(`{"steps": [{"input_tokens": 10, "output_tokens": 5}, {"output_tokens": 5, "tools": [{"latency": "100000h"}]}]}` + "\n")},
	} {
		if err := os.WriteFile(f.path, f.data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(results, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range hostileInputs {
		args := make([]string, len(c.args))
		for i, a := range c.args {
			args[i] = strings.NewReplacer("BINARY", binary, "HUGETRACE", huge, "RESULTS", results, "BIGRESULT", bigResult, "LONGTOOL", longTool).Replace(a)
		}
		want := strings.NewReplacer("BINARY", binary).Replace(c.want)
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", `ulimit -v 4194304 && exec "$0" "$@"`, bin}, args...)...)
			cmd.Dir = dir
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := process.Run(cmd)
			code := -1
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err == nil {
				code = 0
			}
			msg := stderr.String()
			if strings.Contains(msg, "fatal error") || strings.Contains(msg, "panic:") || strings.Contains(msg, "goroutine ") {
				t.Fatalf("the runtime failed:\n%.2000s", msg)
			}
			if code != ExitUsage || !strings.Contains(msg, want) {
				t.Errorf("exit %d, want 2 with a sentence naming %s:\n%.1000s", code, want, msg)
			}
			for _, r := range msg {
				if r < 0x20 && r != '\n' && r != '\t' {
					t.Fatalf("a raw control byte %#x on stderr:\n%q", r, msg)
				}
			}
		})
	}
}
