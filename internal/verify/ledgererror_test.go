package verify

import (
	"math"
	"strings"
	"testing"
)

// pastOf is a ledger of one row per verify: lever's error at metric and
// stat, one entry per error.
func pastOf(lever, metric, stat string, errs ...float64) []Entry {
	var out []Entry
	for _, e := range errs {
		out = append(out, Entry{Lever: lever, Rows: []Row{{Metric: metric, Stat: stat, Error: e, Verdict: Worse}}})
	}
	return out
}

// TestLedgerErrorByHand: five past errors of the lever at TTFT P50, +10,
// −30, +5, +20 and −50 %: |error| sorted 5, 10, 20, 30, 50 %; the
// nearest-rank 80th percentile is the ⌈0.8·5⌉ = 4th, 30 %. Another
// lever's rows, other rows, rows with no data and a verify whose runs saw
// different machines do not count; under MinLedger past rows there is
// none.
func TestLedgerErrorByHand(t *testing.T) {
	past := pastOf("max-num-seqs", "ttft", "p50", 0.10, -0.30, 0.05, 0.20, -0.50)
	past = append(past, pastOf("replicas", "ttft", "p50", 0.9)...)
	past = append(past, pastOf("max-num-seqs", "ttft", "p95", 0.9)...)
	past = append(past, Entry{Lever: "max-num-seqs", Rows: []Row{{Metric: "ttft", Stat: "p50", Error: 0.9, Verdict: NoData}}},
		Entry{Lever: "max-num-seqs", MachineMoved: true, Rows: []Row{{Metric: "ttft", Stat: "p50", Error: 2.4, Verdict: Outside}}})
	for _, tt := range []struct {
		lever, metric, stat string
		want                float64
		n                   int
	}{
		{"max-num-seqs", "ttft", "p50", 0.30, 5},
		{"max-num-seqs", "ttft", "p95", 0, 1},
		{"replicas", "ttft", "p50", 0, 1},
		{"", "ttft", "p50", 0, 0},
	} {
		got, n := LedgerError(past, tt.lever, tt.metric, tt.stat)
		if math.Abs(got-tt.want) > 1e-12 || n != tt.n {
			t.Errorf("LedgerError(%s, %s %s) = %v over %d, want %v over %d", tt.lever, tt.metric, tt.stat, got, n, tt.want, tt.n)
		}
	}
	// Three past errors of 10, 20 and 40 %: the ⌈2.4⌉ = 3rd, 40 %.
	if got, n := LedgerError(pastOf("l", "e2e", "p95", 0.1, -0.2, 0.4), "l", "e2e", "p95"); got != 0.4 || n != 3 {
		t.Errorf("three errors: %v over %d, want 0.4 over 3", got, n)
	}
}

// TestWithLedgerByHand: a row predicted from draws 100, 110, 90 ms with
// the twin's own e of 5 % (stated; its miss of BEFORE 2 %) spans
// 86.24 … 113.76 ms, so 125 ms measured is worse than predicted. The
// ledger's 30 % (TestLedgerErrorByHand) exceeds 5 %: h = √(12.816² + 30²)
// = √1064.25 = 32.62, the interval 67.38 … 132.62 ms, and 125 ms is as
// predicted, error +25 %. A row whose ledger error, 3 %, is below its own
// keeps its interval and records the 3 %.
func TestWithLedgerByHand(t *testing.T) {
	base := func(metric string) Row {
		r := Row{Metric: metric, Stat: "p50", Unit: "ms", Anchor: 1, Draws: []float64{100, 110, 90}, StatedError: 0.05, BeforeMiss: 0.02, Measured: 125}
		r.Predicted, r.Low, r.High = Interval(r.Draws, RelativeError(r.StatedError, r.BeforeMiss), Noise{})
		r.Error = (r.Measured - r.Predicted) / r.Predicted
		r.Verdict = Judge(r.Measured, r.Predicted, r.Low, r.High, false)
		return r
	}
	rows := []Row{base("ttft"), base("tpot")}
	if rows[0].Verdict != Worse || math.Abs(rows[0].High-113.757) > 1e-3 {
		t.Fatalf("without the ledger: %+v", rows[0])
	}
	past := append(pastOf("max-num-seqs", "ttft", "p50", 0.10, -0.30, 0.05, 0.20, -0.50), pastOf("max-num-seqs", "tpot", "p50", 0.01, 0.02, -0.03)...)
	notes := withLedger(rows, past, "max-num-seqs")
	r := rows[0]
	if r.Verdict != AsPredicted || math.Abs(r.Low-67.377) > 1e-3 || math.Abs(r.High-132.623) > 1e-3 || math.Abs(r.Error-0.25) > 1e-12 ||
		r.LedgerError != 0.3 || r.LedgerCount != 5 {
		t.Errorf("with the ledger: %v [%v, %v] %s, ledger %v over %d; want 100 [67.377, 132.623] as predicted, 0.3 over 5",
			r.Predicted, r.Low, r.High, r.Verdict, r.LedgerError, r.LedgerCount)
	}
	if r := rows[1]; r.Verdict != Worse || math.Abs(r.High-113.757) > 1e-3 || r.LedgerError != 0.03 || r.LedgerCount != 3 {
		t.Errorf("a ledger error below the twin's own: %+v", r)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "ttft p50 ±30 %") || strings.Contains(notes[0], "tpot") {
		t.Errorf("notes %q", notes)
	}
	// Too few past verifies of the lever: nothing changes, nothing said.
	rows = []Row{base("ttft")}
	if notes := withLedger(rows, past[:2], "max-num-seqs"); notes != nil || rows[0].Verdict != Worse || rows[0].LedgerCount != 0 {
		t.Errorf("two past verifies: notes %q, row %+v", notes, rows[0])
	}
}
