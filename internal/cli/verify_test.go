package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/serve"
	"github.com/tokentrace/tokentrace/internal/verify"
)

// verifyJSON runs verify --format json and decodes its answer.
func verifyJSON(t *testing.T, args ...string) *verify.Result {
	t.Helper()
	out, err := run(t, append([]string{"verify", "--format", "json"}, args...)...)
	if err != nil {
		t.Fatalf("verify %v: %v\n%s", args, err, out)
	}
	var r verify.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("verify JSON: %v\n%s", err, out)
	}
	return &r
}

// benched runs bench against its embedded engine into a new folder.
func benched(t *testing.T, name string, args ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if out, err := run(t, append([]string{"bench", "--output-dir", dir}, args...)...); err != nil {
		t.Fatalf("bench %v: %v\n%s", args, err, out)
	}
	return dir
}

func rowOf(t *testing.T, r *verify.Result, metric, stat string) verify.Row {
	t.Helper()
	for _, x := range r.Rows {
		if x.Metric == metric && x.Stat == stat {
			return x
		}
	}
	t.Fatalf("no %s %s row in %+v", metric, stat, r.Rows)
	return verify.Row{}
}

func oneChange(t *testing.T, r *verify.Result, setting, before, after, source, lever string) {
	t.Helper()
	for _, c := range r.Changes {
		if c.Setting == setting {
			if c.Before != before || c.After != after || c.Source != source || c.Lever != lever || !c.Modeled {
				t.Errorf("change %+v, want %s: %s → %s from %s, lever %s", c, setting, before, after, source, lever)
			}
			return
		}
	}
	t.Errorf("no change of %s found in %+v", setting, r.Changes)
}

// Two simulated runs, max-num-seqs 2 → 4 under a closed loop of 8
// workers: the twin is the engine that ran them, so verify finds the
// change in the runs' settings and predicts the second run exactly; the
// ledger keeps it and summarises it.
func TestVerifySimulatedRunsIsExact(t *testing.T) {
	load := []string{"--concurrency", "8", "--requests", "48", "--input-tokens", "256", "--output-tokens", "32"}
	before := simulated(t, append(load, "--max-num-seqs", "2")...)
	after := simulated(t, append(load, "--max-num-seqs", "4")...)
	// report's what-if names the remedy and the command that checks it.
	w := whatIfJSON(t, before, "--slo", "ttft:p95<=300ms", "--what-if", "max-num-seqs").WhatIf
	if w == nil {
		t.Fatal("no what-if")
	}
	if _, rem := remedy(w, "max-num-seqs"); rem == nil || rem.Applied != "max_num_seqs=4" ||
		w.VerifyCommand(*rem) != "tokentrace verify "+before+" AFTER --applied max_num_seqs=4" {
		t.Fatalf("remedies %+v", w.Remedies)
	}
	ledger := filepath.Join(t.TempDir(), "twin.jsonl")
	r := verifyJSON(t, before, after, "--ledger", ledger)
	oneChange(t, r, "max_num_seqs", "2", "4", "simulated engine", "max-num-seqs")
	if r.Lever != "max-num-seqs" || r.Judged < 13 || r.Held != r.Judged {
		t.Fatalf("lever %q, %d of %d held; rows %+v", r.Lever, r.Held, r.Judged, r.Rows)
	}
	for _, x := range r.Rows {
		if x.Verdict != verify.NoData && math.Abs(x.Error) > 1e-9 {
			t.Errorf("%s %s: predicted %v, measured %v: the twin is the engine, the error must be 0", x.Metric, x.Stat, x.Predicted, x.Measured)
		}
	}
	if ttft := rowOf(t, r, "ttft", "p50"); !(ttft.Measured < 0.6*ttft.Before) {
		t.Errorf("TTFT P50 %v → %v: twice the slots should cut the queue", ttft.Before, ttft.Measured)
	}
	// Three verifies of the lever in the ledger: the fourth's rows carry
	// their past errors (all 0, within the twin's own: no interval moves).
	verifyJSON(t, before, after, "--ledger", ledger)
	verifyJSON(t, before, after, "--ledger", ledger)
	r = verifyJSON(t, before, after, "--ledger", ledger)
	if x := rowOf(t, r, "ttft", "p50"); x.LedgerCount != 3 || x.LedgerError != 0 || r.Held != r.Judged ||
		!slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, "no interval widened") }) {
		t.Fatalf("the ledger's past errors: ttft p50 %+v; notes %q", x, r.Notes)
	}
	out, err := run(t, "verify", "--ledger", ledger)
	if err != nil || !strings.Contains(out, "max-num-seqs") || !strings.Contains(out, "(100%)") {
		t.Fatalf("track record: %v\n%s", err, out)
	}
	html := filepath.Join(t.TempDir(), "v.html")
	if out, err := run(t, "verify", before, after, "--format", "html", "-o", html); err != nil {
		t.Fatalf("html: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(html); !strings.Contains(string(b), "as predicted") || !strings.Contains(string(b), "<!DOCTYPE html>") ||
		strings.Count(string(b), "<svg") != 4 {
		t.Errorf("html page lacks its verdicts or its four charts:\n%.500s", b)
	}
}

// A simulated deployment's replicas, its P/D pools and link, and the load
// itself, are levers too: found in the runs' flags and predicted exactly (the twin replays the
// second run's workload when the load changed).
func TestVerifySimulatedReplicasAndLoad(t *testing.T) {
	for _, c := range []struct {
		before, after            []string
		setting, from, to, lever string
	}{
		{[]string{"--rate", "30"}, []string{"--rate", "30", "--replicas", "2"}, "replicas", "1", "2", "replicas"},
		{[]string{"--rate", "10"}, []string{"--rate", "20"}, "rate", "10", "20", "load"},
		{[]string{"--rate", "30", "--replicas", "2"}, []string{"--rate", "30", "--prefill-replicas", "1", "--kv-link", "tcp"}, "pd_split", "2", "1P:1D", "disaggregate"},
	} {
		load := []string{"--requests", "100", "--input-tokens", "1000", "--output-tokens", "32", "--max-num-seqs", "8"}
		r := verifyJSON(t, simulated(t, append(load, c.before...)...), simulated(t, append(load, c.after...)...))
		src := "simulate"
		if c.lever == "replicas" || c.lever == "disaggregate" {
			src = "simulated deployment"
		}
		oneChange(t, r, c.setting, c.from, c.to, src, c.lever)
		if c.lever == "disaggregate" {
			oneChange(t, r, "kv_link", "", "tcp", src, "kv-link")
		}
		for _, x := range r.Rows {
			if x.Verdict != verify.NoData && math.Abs(x.Error) > 1e-9 {
				t.Errorf("%s: %s %s predicted %v, measured %v", c.lever, x.Metric, x.Stat, x.Predicted, x.Measured)
			}
		}
	}
}

// Where the evidence cannot tell (the second folder keeps no settings),
// --applied names the change, and the prediction is the same.
func TestVerifyAppliedWhereEvidenceCannotTell(t *testing.T) {
	load := []string{"--rate", "20", "--requests", "80", "--input-tokens", "1024", "--output-tokens", "16"}
	before := simulated(t, append(load, "--max-num-batched-tokens", "2048")...)
	after := simulated(t, append(load, "--max-num-batched-tokens", "512")...)
	if err := os.Remove(filepath.Join(after, "config.json")); err != nil {
		t.Fatal(err)
	}
	r := verifyJSON(t, before, after)
	if r.Lever != "" || !strings.Contains(strings.Join(r.Notes, "\n"), "--applied") {
		t.Fatalf("no evidence: lever %q, notes %v", r.Lever, r.Notes)
	}
	// FROM:TO also sets the first run's twin (where its evidence is silent
	// too): here the value it had, so the prediction is the same.
	for _, applied := range []string{"token-budget=512", "token-budget=2048:512"} {
		r = verifyJSON(t, before, after, "--applied", applied)
		oneChange(t, r, "max_num_batched_tokens", "2048", "512", "applied", "token-budget")
		for _, x := range r.Rows {
			if x.Verdict != verify.NoData && math.Abs(x.Error) > 1e-9 {
				t.Errorf("%s: %s %s: predicted %v, measured %v", applied, x.Metric, x.Stat, x.Predicted, x.Measured)
			}
		}
	}
}

func TestVerifyBadInput(t *testing.T) {
	dir := simulated(t, "--rate", "20", "--requests", "20", "--output-tokens", "4")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"verify", dir}, "two results folders"},
		{[]string{"verify", dir, dir, "--applied", "warp=9"}, "--applied"},
		{[]string{"verify", dir, dir, "--draws", "1"}, "--draws"},
		{[]string{"verify", dir, filepath.Join(dir, "nope")}, "not a results folder"},
		{[]string{"verify", "--ledger", filepath.Join(dir, "none.jsonl")}, "ledger"},
		{[]string{"verify", dir, dir, "--ledger", filepath.Join(dir, "config.json")}, "config.json: ledger line"},
	} {
		out, err := run(t, tt.args...)
		var ee *ExitError
		if err == nil || !strings.Contains(err.Error(), tt.want) || errors.As(err, &ee) && ee.Code != ExitUsage {
			t.Errorf("%v: %v (want an error naming %q)\n%s", tt.args, err, tt.want, out)
		}
	}
}

// servedCase is one remedy checked against serve: bench on the embedded
// engine before and after it, verify between them.
type servedCase struct {
	name                string
	load, before, after []string
	setting, from, to   string
	lever               string
	metric              string // the metric the remedy moves at P50
	lower               bool   // ... down (else up)
	// small: the remedy moves its metric by less than a loaded machine's
	// own noise (the token budget: TPOT P50 by about 15 %), so only the
	// change found and the rows are checked; its figures are measured on an
	// idle machine (docs/performance.md).
	small bool
}

// Against serve (the embedded engine, wall clock): the change is found in
// the server's own evidence (run.json), the twin predicts the direction
// and size of the metric the remedy moves, and E2E P50 lies within a
// quarter of the prediction (the figures are in docs/performance.md; the
// bound tolerates a loaded machine).
func TestVerifyAgainstServe(t *testing.T) {
	if testing.Short() {
		t.Skip("runs serve on the wall clock for about a minute")
	}
	for _, c := range []servedCase{
		{"prefix caching", []string{"--rate", "8", "--requests", "48", "--input-tokens", "2000", "--prefix-tokens", "1800", "--prefix-groups", "1", "--output-tokens", "16"},
			[]string{"--sim-enable-prefix-caching=false"}, []string{"--sim-enable-prefix-caching=true"},
			"enable_prefix_caching", "false", "true", "prefix-caching", "ttft", true, false},
		{"token budget", []string{"--rate", "6", "--requests", "48", "--input-tokens", "lognormal:mean=3000,sigma=0.5", "--output-tokens", "64"},
			[]string{"--sim-max-num-batched-tokens", "4096"}, []string{"--sim-max-num-batched-tokens", "512"},
			"max_num_batched_tokens", "4096", "512", "token-budget", "tpot", true, true},
		{"slots", []string{"--concurrency", "8", "--requests", "32", "--input-tokens", "256", "--output-tokens", "64"},
			[]string{"--sim-max-num-seqs", "2"}, []string{"--sim-max-num-seqs", "4"},
			"max_num_seqs", "2", "4", "max-num-seqs", "ttft", true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := benched(t, "before", append(c.load, c.before...)...)
			after := benched(t, "after", append(c.load, c.after...)...)
			r := verifyJSON(t, before, after)
			oneChange(t, r, c.setting, c.from, c.to, "server", c.lever)
			if r.Lever != c.lever {
				t.Errorf("lever %q, want %q (changes %+v)", r.Lever, c.lever, r.Changes)
			}
			m := rowOf(t, r, c.metric, "p50")
			if c.small {
				t.Logf("%s: %s; %s", c.name, r.Summary(), rowErrors(r))
				return
			}
			if moved := m.Predicted < m.Before; moved != c.lower || (m.Measured < m.Before) != c.lower {
				t.Errorf("%s P50: before %v, predicted %v, measured %v: want both moved the same way", c.metric, m.Before, m.Predicted, m.Measured)
			}
			switch e := rowOf(t, r, "e2e", "p50"); {
			case math.Abs(e.Error) <= 0.25:
			case r.MachineMoved: // verify's own note: the runs' errors judge the machine, not the twin
				t.Logf("E2E P50 predicted %v, measured %v (error %.0f%%), the machine not the same in both runs: not judged", e.Predicted, e.Measured, 100*e.Error)
			default:
				t.Errorf("E2E P50 predicted %v, measured %v (error %.0f%%)", e.Predicted, e.Measured, 100*e.Error)
			}
			t.Logf("%s: %s; %s", c.name, r.Summary(), rowErrors(r))
		})
	}
}

// serveWith runs serve in process until the test ends, its default
// options changed by set (nil: the defaults), and returns its base URL
// (no /v1: a gateway's replica; bench takes it with /v1).
func serveWith(t *testing.T, set func(*serve.Options)) string {
	t.Helper()
	o := serve.DefaultOptions()
	if set != nil {
		set(&o)
	}
	cfg, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := serve.Start(t.Context(), cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return strings.TrimSuffix(srv.URL(), "/v1")
}

// slots sets serve's max_num_seqs.
func slots(n int) func(*serve.Options) {
	return func(o *serve.Options) { o.Engine.MaxNumSeqs = n }
}

// A measured server (serve over HTTP, as bench --url sees any engine):
// the twin is a profile calibrated on the first run, and the change of
// slots is found in the server's /metrics evidence, without --applied.
func TestVerifyMeasuredServerCalibratedOnBefore(t *testing.T) {
	if testing.Short() {
		t.Skip("runs serve on the wall clock and calibrates")
	}
	load := []string{"--concurrency", "8", "--requests", "32", "--input-tokens", "256", "--output-tokens", "64", "--ignore-eos", "--seed", "3"}
	before := benched(t, "before", append(load, "--url", serveWith(t, slots(2))+"/v1")...)
	after := benched(t, "after", append(load, "--url", serveWith(t, slots(4))+"/v1")...)
	profile := filepath.Join(t.TempDir(), "before.yaml")
	if out, err := run(t, "calibrate", before, "--model", "Llama-3.1-8B", "--gpu", "H100-SXM", "--max-num-seqs", "2", "-o", profile); err != nil {
		t.Fatalf("calibrate: %v\n%s", err, out)
	}
	if _, err := run(t, "verify", before, after); err == nil || !strings.Contains(err.Error(), "--profile") {
		t.Errorf("a measured run without a profile: %v, want an error asking for --profile", err)
	}
	r := verifyJSON(t, before, after, "--profile", profile)
	oneChange(t, r, "max_num_seqs", "2", "4", "server", "max-num-seqs")
	if r.Basis != "profile before.yaml" {
		t.Errorf("basis %q", r.Basis)
	}
	if m := rowOf(t, r, "ttft", "p50"); !(m.Predicted < 0.7*m.Before) || !(m.Measured < 0.7*m.Before) {
		t.Errorf("TTFT P50 before %v, predicted %v, measured %v: both should fall with twice the slots", m.Before, m.Predicted, m.Measured)
	}
	if e := rowOf(t, r, "e2e", "p50"); math.Abs(e.Error) > 0.25 {
		t.Errorf("E2E P50 predicted %v, measured %v (error %.0f%%)", e.Predicted, e.Measured, 100*e.Error)
	}
	t.Logf("measured server: %s; %s", r.Summary(), rowErrors(r))
}

// rowErrors lists each judged row's error and its interval's half-width
// (relative to the prediction), for the test's log.
func rowErrors(r *verify.Result) string {
	var b strings.Builder
	for _, x := range r.Rows {
		if x.Verdict != verify.NoData {
			fmt.Fprintf(&b, "%s %s %+.1f%% (±%.0f%%)%s ", x.Metric, x.Stat, 100*x.Error, 50*(x.High-x.Low)/x.Predicted,
				map[bool]string{true: "", false: "*"}[x.Verdict == verify.AsPredicted])
		}
	}
	return b.String()
}
