package report_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/cli"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/report"
)

// tokentrace runs the command line as a user would and returns its output.
func tokentrace(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := cli.NewRoot()
	var out, errb bytes.Buffer
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errb)
	err := root.ExecuteContext(context.Background())
	return out.String() + errb.String(), err
}

// TestBenchOverloadDiagnosedAsQueueing runs `tokentrace bench` against the
// embedded engine with room for two running requests and 60 arrivals a
// second — far past its capacity — then `tokentrace report --format json`
// on the results folder. The diagnosis must name the server's queue as the
// dominant TTFT term, with the offered rate above the measured capacity.
func TestBenchOverloadDiagnosedAsQueueing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs bench against the embedded engine (about 5 s)")
	}
	dir := filepath.Join(t.TempDir(), "overload")
	console, err := tokentrace(t, "bench", "--rate", "60", "--requests", "80", "--sim-max-num-seqs", "2",
		"--output-tokens", "16", "--input-tokens", "128", "--no-calibration", "--output-dir", dir,
		"--slo", "ttft:p99<=200ms", "--seed", "7")
	var ee *cli.ExitError
	if !errors.As(err, &ee) || ee.Code != 3 {
		t.Fatalf("bench: err %v, want exit status 3 (a failed SLO)\n%s", err, console)
	}
	// bench's console summary is the report's: it names the queue too.
	if !strings.Contains(console, "TTFT is dominated by waiting in the server's queue") {
		t.Errorf("bench's summary lacks the diagnosis:\n%s", console)
	}

	// report judges the SLO as bench did: exit status 3, the report written.
	out, err := tokentrace(t, "report", dir, "--slo", "ttft:p99<=200ms", "--format", "json")
	if !errors.As(err, &ee) || ee.Code != cli.ExitSLOFailed {
		t.Fatalf("report: err %v, want exit status 3 (a failed SLO)\n%s", err, out)
	}
	var rep report.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("report JSON: %v\n%s", err, out)
	}
	k := slices.IndexFunc(rep.Findings, func(f report.Finding) bool { return f.Rule == report.RuleServerQueueing })
	if k < 0 {
		t.Fatalf("no server-queueing finding; findings: %+v", rep.Findings)
	}
	f := rep.Findings[k]
	if f.Severity != "critical" || f.Numbers["offered_rps"] <= f.Numbers["capacity_rps"] {
		t.Errorf("overload not established: %+v", f)
	}
	tail := rep.TTFTSplit.Groups[1]
	if tail.Name != "p95+" || tail.Largest != string(latency.StageServerQueue) {
		t.Errorf("TTFT tail's largest term: %+v", tail)
	}
	if rep.SLOs[0].Status != "fail" || rep.Summary.Requests != 80 {
		t.Errorf("verdict %+v, summary %+v", rep.SLOs[0], rep.Summary)
	}
	text, err := tokentrace(t, "report", dir, "--slo", "ttft:p99<=200ms")
	if !errors.As(err, &ee) || ee.Code != cli.ExitSLOFailed {
		t.Fatalf("report: err %v, want exit status 3", err)
	}
	t.Logf("\n%s", text)
}

// TestBenchLongPromptsDiagnosedAsPrefill runs `tokentrace bench` one request
// at a time (no queue) with prompts of 500 to 8,000 tokens against the
// embedded engine: the report must say TTFT is prefill, rising with the
// prompt, and give the fitted cost per 1k input tokens.
func TestBenchLongPromptsDiagnosedAsPrefill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs bench against the embedded engine (about 5 s)")
	}
	dir := filepath.Join(t.TempDir(), "prefill")
	console, err := tokentrace(t, "bench", "--concurrency", "1", "--requests", "30",
		"--input-tokens", "uniform:500-8000", "--output-tokens", "4", "--no-calibration", "--output-dir", dir,
		"--slo", "ttft:p99<=100ms", "--seed", "3")
	var ee *cli.ExitError
	if !errors.As(err, &ee) || ee.Code != 3 {
		t.Fatalf("bench: err %v, want exit status 3 (a failed SLO)\n%s", err, console)
	}
	slos, _ := latency.ParseSLOs("ttft:p99<=100ms")
	rep, err := report.Load(context.Background(), []string{dir}, report.Options{SLOs: slos})
	if err != nil {
		t.Fatal(err)
	}
	k := slices.IndexFunc(rep.Findings, func(f report.Finding) bool { return f.Rule == report.RulePrefillBound })
	if k < 0 {
		t.Fatalf("no prefill-bound finding; findings: %+v", rep.Findings)
	}
	f := rep.Findings[k]
	if slope := f.Numbers["ms_per_1k_input"]; slope < 5 || slope > 200 || f.Numbers["r2"] < 0.9 {
		t.Errorf("fit: %v ms per 1k tokens, R² %v", slope, f.Numbers["r2"])
	}
	if slices.ContainsFunc(rep.Findings, func(f report.Finding) bool { return f.Rule == report.RuleServerQueueing }) {
		t.Errorf("one request at a time cannot queue: %+v", rep.Findings)
	}
	t.Logf("%s: %s", f.Title, f.Evidence)
}
