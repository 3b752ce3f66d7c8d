package ollamatest_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/tokentrace/tokentrace/internal/enginetest"
	"github.com/tokentrace/tokentrace/internal/ollamatest"
	"github.com/tokentrace/tokentrace/internal/racedetect"
	"github.com/tokentrace/tokentrace/internal/verify"
)

// TestVerifyMoreSlotsAgainstOllama is the loop's last step against a real
// engine: 8 workers on 2 parallel slots queue; a profile is calibrated on
// that run (the llama.cpp family on this CPU's thread, as the twin test);
// the same load runs on 4 slots; verify predicts the second run from the
// first with the change named — Ollama exposes no slot count, so
// --applied max-num-seqs=2:4 sets both runs' — and sets the prediction
// beside the measurement. The twin, calibrated on 2 slots, keeps 4 slots
// in lockstep where Ollama hands each freed slot its next request through
// its server's queue and runner one at a time (docs/performance.md): a
// model error of the change that BEFORE cannot show, so verify runs with a
// ledger of past verifies of this change on this machine
// (testdata/ledger.jsonl), whose errors enter the intervals
// (docs/metrics.md, "Verify"). It asserts the change, the lever, every
// row judged and the ledger's errors in the TTFT and E2E rows; and, where
// verify finds the machine the same in both runs, at least 3 of the 4
// TTFT/E2E P50/P95 rows within their interval. A run whose machine moved
// is logged, not judged: the machine's load, not the twin, decides it.
func TestVerifyMoreSlotsAgainstOllama(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ollama twice (about two minutes)")
	}
	if racedetect.Enabled {
		t.Skip("fits the twin in process: nothing for -race to check")
	}
	dir := t.TempDir()
	gpus, err := filepath.Abs(cpuDevice)
	if err != nil {
		t.Fatal(err)
	}
	load := []string{"--concurrency", "8", "--requests", "48"}
	runOn := func(parallel int, name string) (string, *ollamatest.Server) {
		s := ollamatest.Start(t, ollamatest.Options{Parallel: parallel})
		d := filepath.Join(dir, name)
		checkRun(t, bench(t, s.URL, s.Model, d, load...), d, 32)
		s.Stop()
		return d, s
	}
	before, s := runOn(2, "before")
	model := filepath.Join(dir, "config.json")
	if err := os.WriteFile(model, enginetest.ConfigJSON(s.Shape, s.Context), 0o600); err != nil {
		t.Fatal(err)
	}
	profile := filepath.Join(dir, "before.yaml")
	out, err := tokentrace(t, "calibrate", before, "-o", profile, "--model", model, "--gpu", "cpu-zen5-1t", "--gpu-file", gpus,
		"--engine", "llamacpp", "--dtype", "fp16", "--max-num-seqs", "2", "--enable-chunked-prefill=false")
	if err != nil {
		t.Fatalf("calibrate: %v\n%s", err, out)
	}
	after, _ := runOn(4, "after")
	past, err := os.ReadFile(filepath.Join("testdata", "ledger.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	ledger := filepath.Join(dir, "ledger.jsonl")
	if err := os.WriteFile(ledger, past, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = tokentrace(t, "verify", before, after, "--profile", profile, "--gpu-file", gpus,
		"--applied", "max-num-seqs=2:4", "--ledger", ledger, "--format", "json")
	if err != nil {
		t.Fatalf("verify: %v\n%s", err, out)
	}
	var r verify.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("verify JSON: %v\n%s", err, out)
	}
	found := false
	for _, c := range r.Changes {
		if c.Setting == "max_num_seqs" && c.Before == "2" && c.After == "4" && c.Source == "applied" {
			found = true
		}
	}
	if !found || r.Lever != "max-num-seqs" || r.Judged < 13 {
		t.Fatalf("verify: lever %q, %d rows judged, changes %+v", r.Lever, r.Judged, r.Changes)
	}
	logRows(t, &r)
	judgeLatencies(t, &r)
}

// logRows logs each judged row: before, predicted with its interval and
// half-width, measured, error, verdict, and the ledger's error.
func logRows(t *testing.T, r *verify.Result) {
	for _, x := range r.Rows {
		if x.Verdict != verify.NoData {
			t.Logf("%s %s: before %.2f, predicted %.2f [%.2f … %.2f] (±%.0f %%; ledger %.0f %% over %d), measured %.2f %s (%+.1f %%): %s",
				x.Metric, x.Stat, x.Before, x.Predicted, x.Low, x.High, 100*(x.High-x.Predicted)/x.Predicted, 100*x.LedgerError, x.LedgerCount,
				x.Measured, x.Unit, 100*x.Error, x.Verdict)
		}
	}
	t.Logf("%s; notes %q", r.Summary(), r.Notes)
}

// judgeLatencies checks the TTFT and E2E rows at P50 and P95: each takes
// the ledger's past errors; where the machine was the same in both runs,
// at least 3 of the 4 lie within their interval.
func judgeLatencies(t *testing.T, r *verify.Result) {
	held := 0
	for _, x := range r.Rows {
		if (x.Metric != "ttft" && x.Metric != "e2e") || (x.Stat != "p50" && x.Stat != "p95") {
			continue
		}
		if x.LedgerCount < verify.MinLedger {
			t.Errorf("%s %s: %d past errors of the ledger, want at least %d", x.Metric, x.Stat, x.LedgerCount, verify.MinLedger)
		}
		if x.Verdict == verify.AsPredicted {
			held++
		}
	}
	t.Logf("TTFT/E2E P50/P95: %d of 4 within the interval", held)
	switch {
	case r.MachineMoved:
		t.Logf("the machine was not the same in both runs: the rows are logged, not judged")
	case held < 3:
		t.Errorf("%d of the 4 TTFT/E2E P50/P95 rows within their interval, want at least 3", held)
	}
}
