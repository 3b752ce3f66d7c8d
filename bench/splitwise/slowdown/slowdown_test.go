package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/results"
)

const ms = int64(1e6)

// writeRecords writes recs as dir's requests.jsonl and returns dir.
func writeRecords(t *testing.T, recs ...latency.Record) string {
	t.Helper()
	dir := t.TempDir()
	var b []byte
	for _, r := range recs {
		r.Schema = latency.RecordSchema
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b = append(append(b, line...), '\n')
	}
	if err := os.WriteFile(filepath.Join(dir, results.RequestsFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// rec is an answered request: prompt p tokens, n output tokens, sent,
// first token and end at those ms.
func rec(p, n int, sent, first, end int64) latency.Record {
	return latency.Record{ID: "r", Status: 200, InputTokens: p, OutputTokens: n, SentNS: sent * ms, FirstTokenNS: first * ms, EndNS: end * ms}
}

// alone: 100 prompt tokens → TTFT 0.1 s, 0.02 s a step (9 steps after the
// first token); 300 → 0.3 s, 0.04 s (10 steps). The failed request and
// the one without a first token are not read.
func alone(t *testing.T) string {
	failed := rec(200, 5, 0, 5000, 9000)
	failed.Status = 500
	noFirst := rec(200, 5, 0, 0, 9000)
	return writeRecords(t, rec(100, 10, 0, 100, 280), rec(300, 11, 0, 300, 700), failed, noFirst)
}

// TestSlowdowns, by hand. Baselines at 200 prompt tokens (halfway):
// TTFT 0.2 s, TBT 0.03 s, E2E with 5 tokens 0.2 + 4 × 0.03 = 0.32 s; at
// 100: 0.1 s, 0.02 s, 0.18 s.
//   - aggregated, 200 tokens, sent at 1 s, first token 1.4 s, end 1.64 s:
//     TTFT 0.4 s → 2; TBT (0.64 − 0.4) / 5 = 0.048 s → 1.6; E2E 0.64 s → 2.
//   - disaggregated, 100 tokens, its prefill hop 30 + 50 ms (TTFT 0.08 s,
//     whatever the first token's instant), end 0.28 s: TTFT → 0.8; TBT
//     (0.28 − 0.08) / 5 = 0.04 s → 2; E2E 0.28 / 0.18 → 1.5556.
func TestSlowdowns(t *testing.T) {
	pd := rec(100, 5, 0, 150, 280)
	pd.Timing = []latency.HopStage{
		{Hop: latency.HopPrefill, Name: "prefill_queue", NS: 30 * ms},
		{Hop: latency.HopPrefill, Name: "prefill", NS: 50 * ms},
		{Hop: latency.HopServer, Name: "kv_transfer", NS: 20 * ms},
	}
	a, err := records(alone(t))
	if err != nil {
		t.Fatal(err)
	}
	run := []latency.Record{rec(200, 5, 1000, 1400, 1640), pd}
	got, err := slowdowns(a, run)
	if err != nil {
		t.Fatal(err)
	}
	want := [3][]float64{{2, 0.8}, {1.6, 2}, {2, 0.28 / 0.18}}
	for m := range want {
		for i := range want[m] {
			if math.Abs(got[m][i]-want[m][i]) > 1e-9 {
				t.Errorf("%s slowdown of request %d = %v, want %v", limits[m].metric, i, got[m][i], want[m][i])
			}
		}
	}
}

// TestJudge: the verdict lines. Of the run above the quantiles of two
// values a, b are a + (b − a) × q: TTFT 0.8, 2 → 1.40, 1.88, 1.99; TBT
// 1.6, 2 → 1.80, 1.96, 2.00; E2E 1.5556, 2 → 1.78, 1.96, 2.00. The run
// alone judged by itself: TTFT and E2E 1; TBT (E2E − TTFT) / n over the
// step time, 0.18 / 10 / 0.02 = 0.9 and 0.4 / 11 / 0.04 = 0.9091 → 0.90,
// 0.91, 0.91.
func TestJudge(t *testing.T) {
	pd := rec(100, 5, 0, 150, 280)
	pd.Timing = []latency.HopStage{{Hop: latency.HopPrefill, Name: "prefill_queue", NS: 30 * ms}, {Hop: latency.HopPrefill, Name: "prefill", NS: 50 * ms}}
	a := alone(t)
	for _, tc := range []struct {
		name string
		run  string
		want string
		ok   bool
	}{
		{"the run", writeRecords(t, rec(200, 5, 1000, 1400, 1640), pd), "FAIL slowdown ttft:p50=1.40<2 ttft:p90=1.88<3 ttft:p99=1.99<6 " +
			"tbt:p50=1.80<1.25! tbt:p90=1.96<1.5! tbt:p99=2.00<5 e2e:p50=1.78<1.25! e2e:p90=1.96<1.5! e2e:p99=2.00<5", false},
		{"alone", a, "PASS slowdown ttft:p50=1.00<2 ttft:p90=1.00<3 ttft:p99=1.00<6 " +
			"tbt:p50=0.90<1.25 tbt:p90=0.91<1.5 tbt:p99=0.91<5 e2e:p50=1.00<1.25 e2e:p90=1.00<1.5 e2e:p99=1.00<5", true},
	} {
		got, ok, err := judge(a, tc.run)
		if err != nil || got != tc.want || ok != tc.ok {
			t.Errorf("%s:\n got %s %v %v\nwant %s %v", tc.name, got, ok, err, tc.want, tc.ok)
		}
	}
	if _, _, err := judge(a, writeRecords(t)); err == nil {
		t.Error("a run with no answered request was judged")
	}
}

// TestCurve: the upper median at each prompt length, interpolated
// between, flat beyond.
func TestCurve(t *testing.T) {
	c := newCurve([]point{{100, 3}, {100, 1}, {300, 7}, {100, 2}, {300, 5}})
	for _, tc := range []struct {
		x    int
		want float64
	}{{50, 2}, {100, 2}, {200, 4.5}, {300, 7}, {400, 7}} {
		if got := c.at(tc.x); got != tc.want {
			t.Errorf("at(%d) = %v, want %v", tc.x, got, tc.want)
		}
	}
}

// TestQuantile: linear between the closest ranks.
func TestQuantile(t *testing.T) {
	for _, tc := range []struct {
		vs   []float64
		q    float64
		want float64
	}{
		{[]float64{5, 1, 3, 2, 4}, 0.5, 3},
		{[]float64{5, 1, 3, 2, 4}, 0.9, 4.6},
		{[]float64{7}, 0.99, 7},
		{[]float64{2, 1}, 0.25, 1.25},
	} {
		if got := quantile(tc.vs, tc.q); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("quantile(%v, %v) = %v, want %v", tc.vs, tc.q, got, tc.want)
		}
	}
}
