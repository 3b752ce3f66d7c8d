package verify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/capacity"
	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/simulate"
)

// The interval by hand: draws 100, 110, 90 (mean 100, s = 10), e = 5 %:
// h = √((1.2816·10)² + (0.05·100)²) = √(164.24 + 25) = 13.757. With the
// measurement's noise σ = 4 % and d = 3 % of c = 100 as well: the spread
// √(10² + 4² + 3²) = √125 = 11.180, h = √((1.2816·11.180)² + 5²) =
// √(205.30 + 25) = 15.176 (docs/metrics.md, "Verify").
func TestIntervalByHand(t *testing.T) {
	c, lo, hi := Interval([]float64{100, 110, 90}, 0.05, Noise{})
	if c != 100 || math.Abs(lo-86.243) > 1e-3 || math.Abs(hi-113.757) > 1e-3 {
		t.Fatalf("Interval = %v [%v, %v], want 100 [86.243, 113.757]", c, lo, hi)
	}
	c, lo, hi = Interval([]float64{100, 110, 90}, 0.05, Noise{Sampling: 0.04, Drift: 0.03})
	if c != 100 || math.Abs(lo-84.824) > 1e-3 || math.Abs(hi-115.176) > 1e-3 {
		t.Fatalf("with noise: Interval = %v [%v, %v], want 100 [84.824, 115.176]", c, lo, hi)
	}
	// The clock's lateness adds as it is: one draw of 100 ms, e = 0 and a
	// lateness of 30 ms give 70 … 130 ms. The runs' lateness at a P50 row
	// is the larger of their P50s, above it of their P99s.
	if c, lo, hi := Interval([]float64{100}, 0, Noise{ClockMS: 30}); c != 100 || lo != 70 || hi != 130 {
		t.Errorf("clock: %v [%v, %v], want 100 [70, 130]", c, lo, hi)
	}
	runs := []results.ClientLateness{{P50MS: 1, P99MS: 20}, {P50MS: 2, P99MS: 10}}
	if p50, p95 := clockAt(runs, 50), clockAt(runs, 95); p50 != 2 || p95 != 20 || clockAt(nil, 99) != 0 {
		t.Errorf("clockAt: P50 %v, P95 %v; want 2 and 20", p50, p95)
	}
	// The anchor: the first run measured 10 ms where its twin gave 8, so
	// the prediction is the twin's times 1.25 (1 where either is missing).
	for _, tt := range []struct{ before, twin, want float64 }{{10, 8, 1.25}, {10, 0, 1}, {math.NaN(), 8, 1}, {0, 8, 1}} {
		if got := anchor(tt.before, tt.twin); got != tt.want {
			t.Errorf("anchor(%v, %v) = %v, want %v", tt.before, tt.twin, got, tt.want)
		}
	}
	// One draw: no spread, the stated error alone; the first draw is the
	// prediction even when the others lie to one side.
	if c, lo, hi := Interval([]float64{200}, 0.10, Noise{}); c != 200 || lo != 180 || hi != 220 {
		t.Errorf("one draw: %v [%v, %v], want 200 [180, 220]", c, lo, hi)
	}
	if c, _, _ := Interval([]float64{50, 60, 70}, 0, Noise{}); c != 50 {
		t.Errorf("prediction %v, want the run's own seed's 50", c)
	}
}

// A run's noise by hand: four requests sent in order with TTFTs 10, 20,
// 30, 40 ms. P50 is 20 ms (rank 2); its bootstrap standard deviation is
// 8.46314 ms (stats.TestBootstrapSDByHand), so Sampling = 8.46314 ÷ 20 =
// 0.42316. The first half's P50 is 10 ms, the second's 30: D = −20 ms,
// and Drift = √(20² − 4·71.62476) ÷ 20 = √113.501 ÷ 20 = 0.53268. With a
// second run of 16 requests the prediction anchored on this run's value
// and that run's measurement both carry sampling error: 0.42316 ×
// √(1 + 4/16) = 0.47310. A
// twin of the run whose halves differ as much leaves no drift.
func TestMeasureNoiseByHand(t *testing.T) {
	dir := t.TempDir()
	var b bytes.Buffer
	for i, ttft := range []int64{10, 20, 30, 40} {
		sent := int64(i) * int64(time.Second)
		r := latency.Record{Schema: latency.RecordSchema, ID: fmt.Sprint(i), SentNS: sent, IntendedNS: sent, Stream: true,
			FirstTokenNS: sent + ttft*int64(time.Millisecond), EndNS: sent + 2*ttft*int64(time.Millisecond), OutputTokens: 1, Status: 200}
		line, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	if err := os.WriteFile(results.RecordsPath(dir), b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	reqs, err := ReadRequests(dir)
	if err != nil {
		t.Fatal(err)
	}
	noise := MeasureNoise(reqs, nil)
	n := noise["ttft p50"]
	if n.Count != 4 || math.Abs(n.Sampling-0.42316) > 1e-5 || math.Abs(n.Drift-0.53268) > 1e-5 {
		t.Errorf("ttft p50 noise %+v, want 4 values, sampling 0.42316, drift 0.53268", n)
	}
	if s := scaled(n, 16); s.Count != 16 || math.Abs(s.Sampling-0.47310) > 1e-5 || s.Drift != n.Drift {
		t.Errorf("scaled to 16: %+v, want sampling 0.47310, drift unchanged", s)
	}
	// A twin whose own halves rise as much (a queue building up is the
	// load's, not noise): no drift left.
	if n := MeasureNoise(reqs, reqs)["ttft p50"]; n.Drift != 0 || math.Abs(n.Sampling-0.42316) > 1e-5 {
		t.Errorf("net of the twin's halves: %+v, want drift 0", n)
	}
	if _, ok := noise["tpot p50"]; ok {
		t.Error("TPOT of one-token answers has no values, so no noise")
	}
}

func TestRelativeError(t *testing.T) {
	for _, tt := range []struct{ stated, miss, want float64 }{
		{0.05, 0.02, 0.05}, {0.05, 0.30, 0.30}, {0.10, math.NaN(), 0.10}, {0.10, math.Inf(1), 0.10},
	} {
		if got := RelativeError(tt.stated, tt.miss); got != tt.want {
			t.Errorf("RelativeError(%v, %v) = %v, want %v", tt.stated, tt.miss, got, tt.want)
		}
	}
}

func TestUnreproducedNamesTheRows(t *testing.T) {
	rs := []Row{
		{Metric: "ttft", Stat: "p50", StatedError: 0.05, BeforeMiss: 0.02, Verdict: AsPredicted},
		{Metric: "ttft", Stat: "p95", StatedError: 0.05, BeforeMiss: 0.30, Verdict: Worse},
		{Metric: "tpot", Stat: "p50", StatedError: 0.10, BeforeMiss: 0.20, Verdict: AsPredicted},
		{Metric: "goodput", Stat: "rate", StatedError: 0.05, BeforeMiss: 0.90, Verdict: NoData},
	}
	if got, want := unreproduced(rs), "ttft p95 (30 % off)"; got != want {
		t.Errorf("unreproduced = %q, want %q", got, want)
	}
}

func TestJudge(t *testing.T) {
	for _, tt := range []struct {
		m      float64
		higher bool
		want   Verdict
	}{
		{100, false, AsPredicted}, {90, false, AsPredicted}, {110, false, AsPredicted},
		{85, false, Better}, {115, false, Worse}, {79, false, Outside}, {121, false, Outside},
		{85, true, Worse}, {115, true, Better}, {math.NaN(), false, NoData},
	} {
		if got := Judge(tt.m, 100, 90, 110, tt.higher); got != tt.want {
			t.Errorf("Judge(%v, higher better %v) = %q, want %q", tt.m, tt.higher, got, tt.want)
		}
	}
}

func run(server map[string]string, rc *simulate.RunConfig) Run {
	return Run{Info: results.RunInfo{Server: &results.ServerInfo{Engine: "tokentrace", Config: server}}, Config: rc}
}

// benchRun is a bench run's typed configuration: its rate and seed, the
// engine it embedded (max_num_seqs, GPU) and its folder.
func benchRun(rate float64, seed uint64, maxNumSeqs int, gpu, dir string) *simulate.RunConfig {
	rc := simulate.RunConfig{Options: simulate.DefaultOptions()}
	rc.Options.Workload.Rate, rc.Options.Workload.Seed, rc.Options.OutputDir = rate, seed, dir
	eng := engine.DefaultOptions()
	eng.MaxNumSeqs, eng.GPU = maxNumSeqs, gpu
	rc.SimEngine = &eng
	return &rc
}

func TestDiffFindsEvidenceAndLoad(t *testing.T) {
	a := run(map[string]string{"max_num_seqs": "2", "enable_prefix_caching": "false", "num_gpu_blocks": "100", "block_size": "16"},
		benchRun(4, 1, 2, "H100-SXM", "a"))
	b := run(map[string]string{"max_num_seqs": "4", "enable_prefix_caching": "false", "num_gpu_blocks": "90", "block_size": "16"},
		benchRun(8, 1, 4, "A100-80GB", "b"))
	got := Diff(a, b)
	var lines []string
	for _, c := range got {
		lines = append(lines, c.String())
	}
	want := []string{
		"max_num_seqs: 2 → 4 (server)",
		"num_gpu_blocks: 100 → 90 (server) — not modelled: " + derived["num_gpu_blocks"],
		"rate: 4 → 8 (bench)",
		"gpu: H100-SXM → A100-80GB (embedded engine) — not modelled: the twin has no such setting",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("Diff:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if got[0].Lever != "max-num-seqs" || got[2].Lever != "load" || leverName(got) != "max-num-seqs+load" {
		t.Errorf("levers %q %q, joined %q", got[0].Lever, got[2].Lever, leverName(got))
	}
}

func TestParseApplied(t *testing.T) {
	for _, tt := range []struct{ in, setting, err string }{
		{"max-num-seqs=4", "max_num_seqs", ""},
		{"enable_prefix_caching=true", "enable_prefix_caching", ""},
		{"sim-max-num-batched-tokens=2048", "max_num_batched_tokens", ""},
		{" replicas = 2 ", "replicas", ""},
		{"max-num-seqs", "", "want LEVER=VALUE"},
		{"max-num-seqs=-1", "", "not a non-negative integer"},
		{"prefix-caching=maybe", "", "not true or false"},
		{"warp-drive=on", "", `unknown lever "warp-drive"`},
		{"gpu-memory-utilization=1.5", "", "fraction"},
		{"max-num-seqs=2:4", "max_num_seqs", ""},
		{"max-num-seqs=:4", "", "FROM:TO"},
		{"max-num-seqs=x:4", "", "not a non-negative integer"},
	} {
		c, err := ParseApplied(tt.in)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("ParseApplied(%q) error %v, want one saying %q", tt.in, err, tt.err)
		case tt.err == "" && (err != nil || c.Setting != tt.setting || !c.Modeled || c.Source != "applied"):
			t.Errorf("ParseApplied(%q) = %+v, %v; want setting %s", tt.in, c, err, tt.setting)
		}
	}
}

func TestAppliedFromTo(t *testing.T) {
	c, err := ParseApplied("max-num-seqs=2:4")
	if err != nil || c.Before != "2" || c.After != "4" || !c.BeforeApplied {
		t.Fatalf("ParseApplied: %+v, %v", c, err)
	}
	var before capacity.Deployment
	if err := applyBefore(&before, []Change{c}); err != nil || before.Engine.MaxNumSeqs != 2 {
		t.Fatalf("applyBefore: %+v, %v", before.Engine, err)
	}
	after := before
	if err := apply(&after, []Change{c}); err != nil || after.Engine.MaxNumSeqs != 4 {
		t.Fatalf("apply: %+v, %v", after.Engine, err)
	}
}

func TestApplyAndMerge(t *testing.T) {
	found := []Change{{Lever: "max-num-seqs", Setting: "max_num_seqs", Before: "2", After: "4", Source: "server", Modeled: true}}
	applied, _ := ParseApplied("max-num-seqs=6")
	if applied.Before != "" || applied.BeforeApplied {
		t.Fatalf("LEVER=VALUE sets no first value: %+v", applied)
	}
	budget, _ := ParseApplied("token-budget=1024")
	cs, notes := merge(found, []Change{applied, budget})
	if len(cs) != 2 || cs[0].After != "6" || len(notes) != 1 {
		t.Fatalf("merge: %+v, notes %v", cs, notes)
	}
	var d capacity.Deployment
	if err := apply(&d, cs); err != nil || d.Engine.MaxNumSeqs != 6 || d.Engine.MaxNumBatchedTokens != 1024 {
		t.Fatalf("apply: %+v, %v", d.Engine, err)
	}
}

func TestLedgerRoundTripAndTrackRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	at := time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
	r1 := &Result{Before: "a", After: "b", Lever: "max-num-seqs", Rows: []Row{
		{Metric: "ttft", Stat: "p50", Error: 0.10, Verdict: AsPredicted},
		{Metric: "ttft", Stat: "p99", Error: 0.50, Verdict: Worse},
		{Metric: "e2e", Stat: "p50", Error: -0.30, Verdict: Better},
		{Metric: "goodput", Stat: "rate", Verdict: NoData},
	}}
	r2 := &Result{Before: "c", After: "d", Lever: "max-num-seqs", MachineMoved: true, Rows: []Row{{Metric: "e2e", Stat: "p95", Error: 0.02, Verdict: AsPredicted}}}
	for _, r := range []*Result{r1, r2} {
		if err := AppendLedger(path, r, at); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	es, err := ReadLedger(bytes.NewReader(b))
	if err != nil || len(es) != 2 || len(es[0].Rows) != 3 || !es[0].At.Equal(at) || es[0].MachineMoved || !es[1].MachineMoved {
		t.Fatalf("ReadLedger: %+v, %v", es, err)
	}
	recs := TrackRecord(es)
	// By hand: 4 judged rows, 2 held; mean |error| over the non-P99 rows
	// (0.10, 0.30, 0.02) = 0.14; worst e2e p50 at 0.30.
	if len(recs) != 1 || recs[0].Verifies != 2 || recs[0].Rows != 4 || recs[0].Held != 2 ||
		math.Abs(recs[0].MeanAbsError-0.14) > 1e-12 || recs[0].WorstError != 0.30 || recs[0].WorstRow != "e2e p50" {
		t.Fatalf("TrackRecord: %+v", recs)
	}
	if _, err := ReadLedger(strings.NewReader("{\"lever\":\"x\"}\nnot json\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a bad line: %v, want an error naming line 2", err)
	}
}

func FuzzParseApplied(f *testing.F) {
	for _, s := range []string{"max-num-seqs=4", "prefix-caching=true", "=", "a=b=c", "replicas=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseApplied(s)
		if err == nil && (c.Setting == "" || c.After == "" || !c.Modeled) {
			t.Fatalf("ParseApplied(%q) = %+v without an error", s, c)
		}
	})
}

func FuzzReadLedger(f *testing.F) {
	f.Add("{\"lever\":\"x\",\"rows\":[{\"metric\":\"ttft\",\"verdict\":\"as predicted\"}]}\n")
	f.Add("\n\n{}")
	f.Fuzz(func(t *testing.T, s string) {
		es, err := ReadLedger(strings.NewReader(s))
		if err == nil {
			_ = TrackRecord(es)
		}
	})
}

// When the load changed (another seed included), the prediction's first
// draw runs the second run's workload at the second run's seed: the very
// arrivals it sent.
func TestWorkloadAfterTakesTheSecondRunsSeed(t *testing.T) {
	after := capacity.Workload{Describe: "after"}
	cfg := Config{Twin: Twin{Seed: 7, Workload: capacity.Workload{Describe: "before"}}, AfterWorkload: &after, AfterSeed: 11}
	seedChange := []Change{{Setting: "seed", Before: "7", After: "11", Source: "bench", Modeled: true}}
	for _, tt := range []struct {
		name      string
		cs        []Change
		afterSeed uint64
		want      uint64
		workload  string
	}{
		{"no change of load", nil, 11, 7, "before"},
		{"another seed", seedChange, 11, 11, "after"},
		{"another seed, the second's unknown", seedChange, 0, 7, "after"},
	} {
		c := cfg
		c.AfterSeed = tt.afterSeed
		w, seed, _, err := workloadAfter(c, tt.cs)
		if err != nil || seed != tt.want || w.Describe != tt.workload {
			t.Errorf("%s: workload %q, seed %d, %v; want %q at %d", tt.name, w.Describe, seed, err, tt.workload, tt.want)
		}
	}
}

// The ledger keeps --applied as verify reads it again; MeanAbsError by
// hand over P50, P95 and the rates: (0.10 + 0.30) ÷ 2 = 0.20.
func TestLedgerAppliedAndMeanAbsError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.jsonl")
	from, _ := ParseApplied("max-num-seqs=2:4")
	to, _ := ParseApplied("token-budget=512")
	r := &Result{Lever: "x", Changes: []Change{from, to, {Setting: "rate", Source: "bench", Before: "1", After: "2"}}}
	if err := AppendLedger(path, r, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	es, err := ReadLedger(bytes.NewReader(b))
	if err != nil || len(es) != 1 || strings.Join(es[0].Applied, " ") != "max_num_seqs=2:4 max_num_batched_tokens=512" {
		t.Fatalf("applied %+v, %v", es, err)
	}
	rows := []Row{{Metric: "ttft", Stat: "p50", Error: 0.10, Verdict: AsPredicted}, {Metric: "ttft", Stat: "p99", Error: 0.9, Verdict: Worse},
		{Metric: "throughput", Stat: "rate", Error: -0.30, Verdict: Better}, {Metric: "goodput", Stat: "rate", Verdict: NoData}}
	if got := MeanAbsError(rows, nil); math.Abs(got-0.20) > 1e-12 {
		t.Errorf("MeanAbsError = %v, want 0.20", got)
	}
	if got := MeanAbsError(rows, func(x Row) bool { return x.Metric == "e2e" }); !math.IsNaN(got) {
		t.Errorf("no row admitted: %v, want NaN", got)
	}
}

// The machine note: bench stalled for 25 % of the first run (500 ms over
// 300 ticks of 5 ms) and 6 % of the second (100 ms): named; 25 % and 22 %
// (425 ms): within 5 points, not; one run without timekeeping: not.
func TestMachineNote(t *testing.T) {
	first := results.ClientLateness{Ticks: 300, PeriodMS: 5, StallMS: 500}
	if n := machineNote([]results.ClientLateness{first, {Ticks: 300, PeriodMS: 5, StallMS: 100}}); len(n) != 1 ||
		!strings.Contains(n[0], "25 % of the first run") || !strings.Contains(n[0], "6 % of the second") {
		t.Errorf("a moved load: %q", n)
	}
	if n := machineNote([]results.ClientLateness{first, {Ticks: 300, PeriodMS: 5, StallMS: 425}}); n != nil {
		t.Errorf("within 5 points: %q", n)
	}
	if n := machineNote([]results.ClientLateness{first}); n != nil {
		t.Errorf("one run: %q", n)
	}
}
