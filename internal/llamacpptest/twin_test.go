package llamacpptest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/enginetest"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/llamacpptest"
	"github.com/tokentrace/tokentrace/internal/racedetect"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// cpuDevice is the device file of one thread of this machine's CPU
// (llama-server -t 1): its measured FMA peak and DRAM read bandwidth.
const cpuDevice = "testdata/cpu.yaml"

// twinTarget is issue 22's bound on the twin's prediction of an unseen
// llama-server load, at P50: 15 % for TTFT and TPOT.
const twinTarget = 0.15

// TestCalibrateThenSimulateAgainstLlamaServer is the twin against a real
// engine: bench two closed-loop loads of llama-server (1 and 4 workers on
// its 4 slots), calibrate the llama.cpp family's profile on them (the
// model's config.json, a hardware entry for one CPU thread, whole-prompt
// steps), then simulate a third, unseen load (8 workers: twice the slots,
// half of them waiting in llama-server's queue) with that profile on its
// own workload (simulate --like) and compare its TTFT and TPOT P50 with
// bench's. The errors are logged (docs/engines.md quotes them); the 15 %
// target is asserted only with TOKENTRACE_TWIN_TARGET=1, on a machine
// quiet enough for llama-server's one thread to keep its own time — on a
// shared, loaded one its steps stretch with the load, which no profile
// predicts.
//
// The held-out load is the larger one. Four workers on four slots have a
// TTFT P50 that turns on whether prompts share a step: their TTFTs fall
// in two groups (alone, 8–10 ms; beside another prompt, 20 ms) and the P50
// lands in either from run to run, on llama-server and on the twin alike
// (docs/performance.md, "A CPU thread as the device": the twin fitted on
// the 4-worker run itself misses its TTFT P50 by −22 … +40 %). The test
// logs the twin's replay of the fitted 4-worker run beside the held-out
// one to show it.
func TestCalibrateThenSimulateAgainstLlamaServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs llama-server (about a minute)")
	}
	if racedetect.Enabled {
		t.Skip("fits the twin in process (calibrate, one goroutine: nothing for -race to check); under -race at load 10-20 it was 5 min in when go test's 10-minute timeout ended the package; bench's client is raced in its own package")
	}
	// Prompt caching off on both sides: bench's prompts share words that
	// llama.cpp's slots would reuse (30–50 of 91 tokens) while the twin,
	// which knows of no shared prefix in this workload, would compute
	// them all.
	s := llamacpptest.Start(t, llamacpptest.Options{Slots: 4, Args: []string{"--no-cache-prompt"}})
	dir := os.Getenv("TOKENTRACE_TWIN_DIR") // kept for a look at the runs
	if dir == "" {
		dir = t.TempDir()
	}
	model := filepath.Join(dir, "config.json")
	if err := os.WriteFile(model, enginetest.ConfigJSON(s.Shape, s.Context), 0o600); err != nil {
		t.Fatal(err)
	}
	gpus, err := filepath.Abs(cpuDevice)
	if err != nil {
		t.Fatal(err)
	}
	const held = 8
	fit := []int{1, 4}
	measured := map[int]*report.Report{}
	for _, c := range append(slices.Clone(fit), held) {
		d := filepath.Join(dir, fmt.Sprintf("c%d", c))
		measured[c] = bench(t, s.URL, d, "--concurrency", fmt.Sprint(c), "--requests", fmt.Sprint(12*max(c, 2)))
		checkRun(t, measured[c])
	}
	engine := []string{"--model", model, "--gpu", "cpu-zen5-1t", "--gpu-file", gpus, "--engine", "llamacpp", "--dtype", "fp16",
		"--max-num-seqs", fmt.Sprint(s.Slots), "--enable-chunked-prefill=false"}
	profile := filepath.Join(dir, "llamacpp.yaml")
	args := []string{"calibrate"}
	for _, c := range fit {
		args = append(args, filepath.Join(dir, fmt.Sprintf("c%d", c)))
	}
	out, err := tokentrace(t, append(append(args, "-o", profile), engine...)...)
	if err != nil {
		t.Fatalf("calibrate: %v\n%s", err, out)
	}
	t.Logf("calibrate:\n%s", out)
	prof, err := os.ReadFile(profile)
	if err != nil || !strings.Contains(string(prof), "llamacpp") {
		t.Fatalf("the profile does not name its engine (%v):\n%s", err, prof)
	}
	var worst float64
	for _, c := range []int{held, fit[len(fit)-1]} {
		name := fmt.Sprintf("%d workers (held out)", c)
		if c != held {
			name = fmt.Sprintf("%d workers (fitted on)", c)
		}
		sim := filepath.Join(dir, fmt.Sprintf("sim%d", c))
		out, err = tokentrace(t, append([]string{"simulate", "--like", filepath.Join(dir, fmt.Sprintf("c%d", c)), "--profile", profile,
			"--output-dir", sim, "--enable-prefix-caching=false"}, engine...)...)
		if err != nil {
			t.Fatalf("simulate: %v\n%s", err, out)
		}
		predicted, err := report.Load(context.Background(), []string{sim}, report.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []string{"ttft", "tpot"} {
			got, want := p50(t, predicted, m), p50(t, measured[c], m)
			e := got/want - 1
			if c == held {
				worst = math.Max(worst, math.Abs(e))
			}
			t.Logf("%s, %s P50: simulated %.2f ms, measured %.2f ms (%+.1f %%)", name, m, got, want, 100*e)
		}
		// A twin in lock-step waves has P50 = P99: the spread says
		// whether its closed loop drifts apart as the server's does.
		for who, rep := range map[string]*report.Report{"simulated": predicted, "measured": measured[c]} {
			for _, d := range rep.Metrics {
				if d.Metric == "ttft" {
					t.Logf("%s, %s TTFT P50 / P90 / P99: %.2f / %.2f / %.2f ms", name, who, d.P50, d.P90, d.P99)
				}
			}
		}
		for who, d := range map[string]string{"simulated": sim, "measured": filepath.Join(dir, fmt.Sprintf("c%d", c))} {
			t.Logf("%s, %s per request: %s", name, who, stagesOf(t, d))
		}
	}
	if os.Getenv("TOKENTRACE_TWIN_TARGET") == "1" && worst > twinTarget {
		t.Errorf("the twin predicts the unseen load %.1f %% off at P50, target %.0f %%", 100*worst, 100*twinTarget)
	}
}

// p50 is a report's P50 of a metric, in milliseconds; it fails the test
// when the report has none.
func p50(t *testing.T, rep *report.Report, metric string) float64 {
	t.Helper()
	for _, d := range rep.Metrics {
		if d.Metric == metric && d.P50 > 0 {
			return d.P50
		}
	}
	b, _ := json.Marshal(rep.Summary)
	t.Fatalf("no %s P50: %s", metric, b)
	return 0
}

// stagesOf says a results folder's per-request stages at P50 / P90: the
// client's transport (TTFT less the server's queue and prefill: where the
// server reports no queue, its waits as well), the server's queue and
// prefill, the time per output token; and how many requests' first
// tokens came in one step (first tokens within 0.5 ms of each other: a
// twin in lock-step waves shows whole waves).
func stagesOf(t *testing.T, dir string) string {
	t.Helper()
	var transport, queue, prefill, tpot []float64
	var firsts []int64
	err := results.EachRecord(results.RecordsPath(dir), func(_ int, r *latency.Record, err error) error {
		if err != nil || !r.OK() || r.Server == nil || r.OutputTokens < 2 {
			return err
		}
		s := r.Server
		transport = append(transport, float64(r.FirstTokenNS-r.SentNS-s.QueueNS-s.PrefillNS)/1e6)
		queue, prefill = append(queue, float64(s.QueueNS)/1e6), append(prefill, float64(s.PrefillNS)/1e6)
		tpot = append(tpot, float64(r.EndNS-r.FirstTokenNS)/1e6/float64(r.OutputTokens-1))
		firsts = append(firsts, r.FirstTokenNS)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	q := func(v []float64) string {
		slices.Sort(v)
		return fmt.Sprintf("%.2f / %.2f", stats.Percentile(v, 50), stats.Percentile(v, 90))
	}
	slices.Sort(firsts)
	waves := map[int]int{}
	for i := 0; i < len(firsts); {
		j := i + 1
		for j < len(firsts) && firsts[j]-firsts[j-1] < 5e5 {
			j++
		}
		waves[j-i]++
		i = j
	}
	return fmt.Sprintf("transport %s ms, queue %s ms, prefill %s ms, TPOT %s ms; first tokens per step (size: count) %v",
		q(transport), q(queue), q(prefill), q(tpot), waves)
}
