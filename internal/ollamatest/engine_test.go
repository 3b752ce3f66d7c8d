package ollamatest_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/cli"
	"github.com/tokentrace/tokentrace/internal/gateway/gatewaytest"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/ollamatest"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/results"
)

// tokentrace runs the command line as a user would.
func tokentrace(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := cli.NewRoot()
	var out bytes.Buffer
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&out)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// bench runs tokentrace bench against url with small requests (64 prompt
// tokens, 32 answer tokens) and returns the report of its results folder.
func bench(t *testing.T, url, model, dir string, args ...string) *report.Report {
	t.Helper()
	args = append([]string{"bench", "--url", url, "--model", model, "--input-tokens", "64", "--output-tokens", "32",
		"--no-calibration", "--seed", "3", "--output-dir", dir}, args...)
	console, err := tokentrace(t, args...)
	var ee *cli.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.Code == cli.ExitSLOFailed) {
		t.Fatalf("bench: %v\n%s", err, console)
	}
	rep, err := report.Load(context.Background(), []string{dir}, report.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// checkRun checks what every run against Ollama must show: no failure,
// and every answer run to its length limit (the model never samples its
// end token).
func checkRun(t *testing.T, rep *report.Report, dir string, outputTokens int) {
	t.Helper()
	s := rep.Summary
	for kind, n := range s.Errors {
		t.Errorf("%d of %d requests failed with %s", n, s.Requests, kind)
	}
	if s.Succeeded == 0 || s.Succeeded != s.Requests {
		t.Fatalf("%d of %d requests succeeded: %v", s.Succeeded, s.Requests, s.Errors)
	}
	short := 0
	err := results.EachRecord(results.RecordsPath(dir), func(_ int, r *latency.Record, err error) error {
		if err == nil && r.OK() && r.OutputTokens != outputTokens {
			short++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if short > 0 {
		t.Errorf("%d of %d answers did not run to %d tokens", short, s.Succeeded, outputTokens)
	}
}

func logFindings(t *testing.T, rep *report.Report) {
	for i, f := range rep.Findings {
		t.Logf("%d [%s] %s: %s\n  do: %s", i, f.Severity, f.Rule, f.Evidence, strings.Join(f.Remedies, "; "))
	}
	t.Logf("notes: %q", rep.Notes)
}

// TestAgainstOllama is the end-to-end suite against a real engine nobody
// on this project wrote: Ollama with 4 parallel requests, one thread and
// the project's random-weight model, on this machine's CPU, over its
// OpenAI-compatible API. It asserts what the tools conclude, never a
// latency.
func TestAgainstOllama(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ollama (about a minute)")
	}
	s := ollamatest.Start(t, ollamatest.Options{Parallel: 4})
	t.Run("closed loop, chat", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "closed")
		rep := bench(t, s.URL, s.Model, dir, "--concurrency", "4", "--requests", "24")
		logFindings(t, rep)
		checkRun(t, rep, dir, 32)
	})
	t.Run("open loop with --duration, completions, then report", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "open")
		rep := bench(t, s.URL, s.Model, dir, "--endpoint", "completions", "--rate", "4", "--duration", "4s")
		logFindings(t, rep)
		checkRun(t, rep, dir, 32)
		if out, err := tokentrace(t, "report", dir); err != nil {
			t.Errorf("report of a --duration run: %v\n%s", err, out)
		}
	})
	t.Run("gateway in front", func(t *testing.T) {
		gw, _ := gatewaytest.Start(t, gatewaytest.OnePool(s.URL, ""))
		dir := filepath.Join(t.TempDir(), "gateway")
		rep := bench(t, gw, s.Model, dir, "--concurrency", "2", "--requests", "12")
		logFindings(t, rep)
		checkRun(t, rep, dir, 32)
	})
	t.Run("1,000 requests, no spurious failure", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "thousand")
		rep := bench(t, s.URL, s.Model, dir, "--concurrency", "8", "--requests", "1000", "--input-tokens", "16", "--output-tokens", "4")
		checkRun(t, rep, dir, 4)
		t.Logf("%d requests, %d succeeded, %d resent on a fresh connection", rep.Summary.Requests, rep.Summary.Succeeded, rep.Summary.Resent)
		if rep.Summary.Requests != 1000 {
			t.Errorf("%d requests measured, want 1000", rep.Summary.Requests)
		}
	})
}

// TestQueueingOnTwoSlots: 8 workers against Ollama running 2 requests at
// once (OLLAMA_NUM_PARALLEL=2), over its native /api/chat: the rest wait in
// Ollama, and the report names the queueing from Ollama's own durations
// (the wait before its prompt_eval_duration, inferred).
func TestQueueingOnTwoSlots(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ollama")
	}
	s := ollamatest.Start(t, ollamatest.Options{Parallel: 2})
	dir := filepath.Join(t.TempDir(), "queue")
	rep := bench(t, s.URL, s.Model, dir, "--endpoint", "ollama", "--concurrency", "8", "--requests", "48")
	logFindings(t, rep)
	checkRun(t, rep, dir, 32)
	if n := rep.Summary.ServerEvidence[latency.SourceOllamaDurations]; n != rep.Summary.Succeeded {
		t.Errorf("%d of %d requests have Ollama's durations as their split: %v", n, rep.Summary.Succeeded, rep.Summary.ServerEvidence)
	}
	k := slices.IndexFunc(rep.Findings, func(f report.Finding) bool { return f.Rule == report.RuleServerQueueing })
	if k < 0 {
		t.Fatalf("no %s finding with 8 workers on 2 slots", report.RuleServerQueueing)
	}
	if ev := rep.Findings[k].Evidence; !strings.Contains(ev, "Ollama") && !strings.Contains(ev, "prompt_eval_duration") {
		t.Errorf("the queueing finding does not cite Ollama's evidence: %s", ev)
	}
}

// TestOneSlotOverItsOpenAIEndpoint: 4 workers against Ollama serving one
// request at a time (OLLAMA_NUM_PARALLEL=1) over its OpenAI-compatible
// /v1/chat/completions, which gives no per-request durations, and Ollama
// has no /metrics: the report names the queueing from the run's shape
// alone — the answers stream one at a time while about 4 are in flight,
// each request's first token timed from the end of the answer before it
// (docs/metrics.md, "Queueing from the run's shape") — as serialised
// service, and says the per-request split is unknown. The model is loaded
// first (POST /api/generate with no prompt, Ollama's way to load one), as
// a user warms a server before measuring it.
func TestOneSlotOverItsOpenAIEndpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ollama")
	}
	s := ollamatest.Start(t, ollamatest.Options{Parallel: 1})
	resp, err := http.Post(s.URL+"/api/generate", "application/json", strings.NewReader(`{"model":"`+s.Model+`","stream":false}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("loading the model: %s", resp.Status)
	}
	dir := filepath.Join(t.TempDir(), "one-slot")
	rep := bench(t, s.URL, s.Model, dir, "--concurrency", "4", "--requests", "24")
	logFindings(t, rep)
	checkRun(t, rep, dir, 32)
	if len(rep.Summary.ServerEvidence) != 0 {
		t.Errorf("a per-request split from Ollama's OpenAI endpoint: %v", rep.Summary.ServerEvidence)
	}
	k := slices.IndexFunc(rep.Findings, func(f report.Finding) bool { return f.Rule == report.RuleServerQueueing })
	if k < 0 {
		t.Fatalf("no %s finding with 4 workers on one slot", report.RuleServerQueueing)
	}
	if f := rep.Findings[k]; !strings.Contains(f.Title, "served one at a time") || !strings.Contains(f.Evidence, "is unknown") {
		t.Errorf("finding %q: %s\nwant one-at-a-time service named from the run's shape, the split unknown", f.Title, f.Evidence)
	}
}
