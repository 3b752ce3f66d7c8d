package ollamatest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/enginetest"
	"github.com/tokentrace/tokentrace/internal/ollamatest"
	"github.com/tokentrace/tokentrace/internal/racedetect"
	"github.com/tokentrace/tokentrace/internal/report"
)

// cpuDevice is the device file of one thread of this machine's CPU (the
// llama.cpp suite's measurement; Ollama runs llama.cpp's kernels on one
// thread here too).
const cpuDevice = "../llamacpptest/testdata/cpu.yaml"

// TestCalibrateThenSimulateAgainstOllama is the twin against Ollama: bench
// two closed-loop loads (1 and 4 workers on its 4 parallel requests),
// calibrate the llama.cpp family's profile on them — Ollama runs its
// llama-architecture models on llama.cpp's runner: up to
// OLLAMA_NUM_PARALLEL sequences in one batch per step, each prompt in one
// step up to num_batch (512) tokens, the rest waiting for a slot, as
// llama-server's slots do — then simulate an unseen load (8 workers) with
// that profile on its own workload and log its TTFT and TPOT P50 beside
// bench's. Logged, not asserted: the machine's load moves the one thread's
// steps, which no profile predicts.
func TestCalibrateThenSimulateAgainstOllama(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ollama (about a minute)")
	}
	if racedetect.Enabled {
		t.Skip("fits the twin in process: nothing for -race to check")
	}
	s := ollamatest.Start(t, ollamatest.Options{Parallel: 4})
	dir := t.TempDir()
	model := filepath.Join(dir, "config.json")
	if err := os.WriteFile(model, enginetest.ConfigJSON(s.Shape, s.Context), 0o600); err != nil {
		t.Fatal(err)
	}
	gpus, err := filepath.Abs(cpuDevice)
	if err != nil {
		t.Fatal(err)
	}
	measured := map[int]*report.Report{}
	for _, c := range []int{1, 4, 8} {
		d := filepath.Join(dir, fmt.Sprintf("c%d", c))
		measured[c] = bench(t, s.URL, s.Model, d, "--concurrency", fmt.Sprint(c), "--requests", fmt.Sprint(6*max(c, 2)))
		checkRun(t, measured[c], d, 32)
	}
	engine := []string{"--model", model, "--gpu", "cpu-zen5-1t", "--gpu-file", gpus, "--engine", "llamacpp", "--dtype", "fp16",
		"--max-num-seqs", fmt.Sprint(s.Parallel), "--enable-chunked-prefill=false"}
	profile := filepath.Join(dir, "ollama.yaml")
	out, err := tokentrace(t, append([]string{"calibrate", filepath.Join(dir, "c1"), filepath.Join(dir, "c4"), "-o", profile}, engine...)...)
	if err != nil {
		t.Fatalf("calibrate: %v\n%s", err, out)
	}
	t.Logf("calibrate:\n%s", out)
	sim := filepath.Join(dir, "sim8")
	out, err = tokentrace(t, append([]string{"simulate", "--like", filepath.Join(dir, "c8"), "--profile", profile,
		"--output-dir", sim, "--enable-prefix-caching=false"}, engine...)...)
	if err != nil {
		t.Fatalf("simulate: %v\n%s", err, out)
	}
	predicted, err := report.Load(context.Background(), []string{sim}, report.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"ttft", "tpot"} {
		got, want := p50(t, predicted, m), p50(t, measured[8], m)
		t.Logf("8 workers (held out), %s P50: simulated %.2f ms, measured %.2f ms (%+.1f %%)", m, got, want, 100*(got/want-1))
	}
}

// p50 is a report's P50 of a metric in milliseconds; it fails the test
// when the report has none.
func p50(t *testing.T, rep *report.Report, metric string) float64 {
	t.Helper()
	for _, d := range rep.Metrics {
		if d.Metric == metric && d.P50 > 0 {
			return d.P50
		}
	}
	t.Fatalf("no %s P50 in %s", metric, strings.Join(rep.Notes, "; "))
	return 0
}
