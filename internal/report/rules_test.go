package report

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/results"
)

func mustSLOs(t testing.TB, s string) []latency.SLO {
	t.Helper()
	slos, err := latency.ParseSLOs(s)
	if err != nil {
		t.Fatal(err)
	}
	return slos
}

// overloadRun: requests arrive at 20 req/s, the server completes 10 req/s,
// so each waits 50 ms longer than the one before it.
func overloadRun(n int) []synthReq {
	out := baseline(n, 20, 3)
	for i := range out {
		out[i].sq = 50 * float64(i) / 2
		out[i].output = 20
	}
	return out
}

// prefillRun: prefill costs 0.05 ms per input token and prompts range from
// 1k to 9k tokens; sessions repeat their previous turn.
func prefillRun(n int) []synthReq {
	out := baseline(n, 5, 4)
	rng := rand.New(rand.NewPCG(4, 4))
	for i := range out {
		out[i].input = 1000 + rng.IntN(8000)
		out[i].prefill = 0.05*float64(out[i].input) + rng.Float64()*5
		out[i].session = int64(i/4 + 1)
		out[i].turn = i%4 + 1
	}
	// Each turn's prompt holds the previous turn's prompt and answer.
	for i := range out {
		if out[i].turn > 1 {
			out[i].input = out[i-1].input + out[i-1].output + 200
			out[i].prefill = 0.05*float64(out[i].input) + 3
		}
	}
	return out
}

// bandwidthRun: a quiet half (2 req/s, 10 ms TPOT) then a busy half
// (20 req/s, TPOT growing with the crowd).
func bandwidthRun() []synthReq {
	var out []synthReq
	quiet := baseline(40, 2, 5)
	for i := range quiet {
		quiet[i].tpot = 10 + rand.New(rand.NewPCG(uint64(i), 1)).Float64()
		quiet[i].output = 100
	}
	busy := baseline(400, 20, 6)
	for i := range busy {
		busy[i].at += 20000
		busy[i].tpot = 30 + rand.New(rand.NewPCG(uint64(i), 2)).Float64()
		busy[i].output = 100
	}
	return append(append(out, quiet...), busy...)
}

// outputRun: 94 % short answers (50 tokens), 6 % long ones (1,000 tokens).
func outputRun(n int) []synthReq {
	out := baseline(n, 10, 7)
	for i := range out {
		out[i].output = 50
		if i%50 < 3 {
			out[i].output = 1000
		}
	}
	return out
}

// collectRun reports on synthetic requests, with bench's run metadata when
// run is not nil.
func collectRun(opts Options, run *results.RunInfo, reqs []synthReq) *Report {
	c := NewCollector(opts)
	if run != nil {
		c.SetRun(*run)
	}
	for j, s := range reqs {
		c.Add(s.record(j))
	}
	return c.Report()
}

// findingIndex is the index of rule's finding in rep, or −1.
func findingIndex(rep *Report, rule string) int {
	return slices.IndexFunc(rep.Findings, func(f Finding) bool { return f.Rule == rule })
}

func TestRules(t *testing.T) {
	errorsRun := baseline(300, 10, 8)
	for i := 0; i < 15; i++ {
		errorsRun[i*20].err = latency.FailHTTP5xx
	}
	errorsRun[7].err = latency.FailTimeout
	stallRun := baseline(300, 10, 9)
	for i := 0; i < 5; i++ {
		stallRun[i*50].stallAt, stallRun[i*50].stall = 10, 2000
	}
	netRun := baseline(300, 10, 10)
	for i := range netRun {
		netRun[i].net = 300
		netRun[i].output = 30
	}
	clientRun := baseline(300, 10, 11)
	for i := range clientRun {
		clientRun[i].cq = 5 * float64(i)
	}
	bursty := baseline(300, 10, 12)
	for i := range bursty {
		bursty[i].at = float64(i/20) * 2000 // 20 at once every 2 s: 10 req/s on average
		bursty[i].sq = float64(i%20) * 60   // each waits for the ones before it
	}
	// TTFT split evenly between the server's queue and prefill: no rule
	// claims it, so the breach finding names the larger.
	splitTTFT := baseline(300, 10, 1)
	for i := range splitTTFT {
		splitTTFT[i].sq = splitTTFT[i].prefill + 1
	}
	cachedRun := prefillRun(200)
	for i := range cachedRun {
		if cachedRun[i].turn > 1 {
			cachedRun[i].cached = cachedRun[i].input / 2
		}
	}
	tests := []struct {
		rule    string
		opts    Options
		reqs    []synthReq
		run     *results.RunInfo
		want    bool
		mention []string // the evidence must cite these
	}{
		{"server-queueing", Options{SLOs: mustSLOs(t, "ttft:p99<=1s")}, overloadRun(200), nil, true,
			[]string{"largest TTFT term", "first quarter", "req/s", "capacity"}},
		{"server-queueing", Options{}, baseline(300, 10, 1), nil, false, nil},
		{"server-queueing", Options{SLOs: mustSLOs(t, "ttft:p99<=300ms")}, bursty, nil, true,
			[]string{"largest TTFT term", "bursts"}},
		{"server-queueing", Options{SLOs: mustSLOs(t, "ttft:p99<=100s")}, overloadRun(200), nil, false, nil},
		{"prefill-bound", Options{SLOs: mustSLOs(t, "ttft:p99<=200ms")}, prefillRun(200), nil, true,
			[]string{"ms per 1k input tokens", "previous turn"}},
		{"prefill-bound", Options{}, baseline(300, 10, 1), nil, false, nil},
		{"prefill-bound", Options{SLOs: mustSLOs(t, "ttft:p99<=200ms")}, cachedRun, nil, true,
			[]string{"served from its prefix cache", "previous turn"}},
		{"prefill-bound", Options{}, overloadRun(200), nil, false, nil},
		{"decode-bandwidth", Options{SLOs: mustSLOs(t, "tpot:p99<=20ms")}, bandwidthRun(), nil, true,
			[]string{"per concurrent request", "memory-bandwidth"}},
		{"decode-bandwidth", Options{}, baseline(300, 10, 1), nil, false, nil},
		{"output-length", Options{SLOs: mustSLOs(t, "e2e:p99<=2s")}, outputRun(300), nil, true,
			[]string{"P90", "per output token", "P99 E2E"}},
		{"output-length", Options{}, baseline(300, 10, 1), nil, false, nil},
		{"outside-model", Options{}, netRun, nil, true, []string{"network"}},
		{"outside-model", Options{}, baseline(300, 10, 1), nil, false, nil},
		{"errors", Options{}, errorsRun, nil, true, []string{"http_5xx 15", "timeout 1", "16 of 300"}},
		{"errors", Options{}, baseline(300, 10, 1), nil, false, nil},
		{"stalls", Options{}, stallRun, nil, true, []string{"5 request(s)", "2.01s"}},
		{"stalls", Options{}, baseline(300, 10, 1), nil, false, nil},
		{"slo-breach", Options{SLOs: mustSLOs(t, "ttft:p99<=25ms")}, splitTTFT, nil, true,
			[]string{"ttft:p99<=25ms fails", "server_queue takes", "P99 (3 requests)"}},
		// Equal-weight prompts with no trend: the server's split names prefill.
		{"prefill-bound", Options{SLOs: mustSLOs(t, "ttft:p99<=25ms")}, baseline(300, 10, 1), nil, true,
			[]string{"ttft:p99<=25ms fails", "largest TTFT term", "ms per 1k tokens"}},
		// One request at a time: no batch to blame, the step is the model's,
		// named with its floor and levers.
		{"decode-bandwidth", Options{SLOs: mustSLOs(t, "tpot:p99<=5ms")}, baseline(60, 0.5, 1), nil, true,
			[]string{"tpot:p99<=5ms fails", "One stream decodes at a time", "bytes read per token ÷ the memory bandwidth"}},
		{"slo-breach", Options{SLOs: mustSLOs(t, "tpot:p99<=5ms")}, baseline(60, 0.5, 1), nil, false, nil},
		// A steady batch of about ten: the fixed-concurrency decode rule.
		{"decode-bandwidth", Options{SLOs: mustSLOs(t, "tpot:p99<=5ms")}, baseline(300, 10, 1), nil, true,
			[]string{"tpot:p99<=5ms fails", "the median request misses the objective too", "memory-bandwidth bound"}},
		{"slo-breach", Options{SLOs: mustSLOs(t, "ttft:p99<=1s")}, baseline(300, 10, 1), nil, false, nil},
		{"slo-breach", Options{SLOs: mustSLOs(t, "ttft:p99<=1s")}, overloadRun(200), nil, false, nil},
		{"client-bottleneck", Options{}, clientRun, nil, true, []string{"P99 client queue"}},
		{"client-bottleneck", Options{}, baseline(300, 10, 1), &results.RunInfo{OverheadFloor: 8 * time.Millisecond}, true,
			[]string{"overhead floor is 8.00ms"}},
		{"client-bottleneck", Options{}, baseline(300, 10, 1), &results.RunInfo{OverheadFloor: time.Millisecond}, false, nil},
		{"client-bottleneck", Options{}, baseline(300, 10, 1), &results.RunInfo{Warnings: []string{"CPU 95%"}}, true,
			[]string{"bench warned: CPU 95%", "still the server's"}},
	}
	for i, tt := range tests {
		t.Run(fmt.Sprintf("%d-%s-%v", i, tt.rule, tt.want), func(t *testing.T) {
			rep := collectRun(tt.opts, tt.run, tt.reqs)
			k := findingIndex(rep, tt.rule)
			if got := k >= 0; got != tt.want {
				t.Fatalf("rule %s fired = %v, want %v; findings: %+v", tt.rule, got, tt.want, rep.Findings)
			}
			if k < 0 {
				return
			}
			f := rep.Findings[k]
			for _, m := range tt.mention {
				if !strings.Contains(f.Evidence, m) {
					t.Errorf("evidence lacks %q:\n%s", m, f.Evidence)
				}
			}
			if len(f.Remedies) == 0 || len(f.Numbers) == 0 {
				t.Errorf("finding without remedies or numbers: %+v", f)
			}
			t.Logf("%s: %s", f.Title, f.Evidence)
		})
	}
}

// TestPrefillInterference builds decoders whose token streams pause exactly
// while other (long-prompt) requests prefill, and a control run whose
// pauses fall at fixed token positions unrelated to the prefills.
// interferenceRecords: decoders whose token streams pause exactly while
// other (long-prompt) requests prefill when aligned, or at fixed token
// positions unrelated to the prefills when not.
func interferenceRecords(aligned bool) []*latency.Record {
	var recs []*latency.Record
	ns := func(v float64) int64 { return int64(v * msNS) }
	// Long prompts: a 150 ms prefill every 1.5 s, starting at 1 s.
	type win struct{ lo, hi float64 }
	var wins []win
	for j := 0; j < 12; j++ {
		lo := 1000 + 1500*float64(j)
		wins = append(wins, win{lo, lo + 150})
		recs = append(recs, &latency.Record{Schema: 1, ID: fmt.Sprintf("p%d", j), Stream: true,
			IntendedNS: ns(lo - 5), SentNS: ns(lo - 5), FirstTokenNS: ns(lo + 150), EndNS: ns(lo + 160),
			ChunkNS: []int64{ns(lo + 150), ns(lo + 160)}, InputTokens: 8000, OutputTokens: 2,
			Server: &latency.ServerSplit{QueueNS: ns(1), PrefillNS: ns(150), DecodeNS: ns(10)}})
	}
	rng := rand.New(rand.NewPCG(12, 12))
	for k := 0; k < 60; k++ {
		start := 300 * float64(k)
		first := start + 30
		stallAt := 20 + rng.IntN(110)
		r := &latency.Record{Schema: 1, ID: fmt.Sprintf("d%d", k), Stream: true, IntendedNS: ns(start),
			SentNS: ns(start), FirstTokenNS: ns(first), InputTokens: 200, OutputTokens: 150,
			Server: &latency.ServerSplit{QueueNS: ns(2), PrefillNS: ns(15)}}
		tm := first
		for i := 0; i < 150; i++ {
			if i > 0 {
				tm += 10
				if aligned {
					for _, w := range wins {
						if tm > w.lo && tm < w.hi {
							tm = w.hi
						}
					}
				} else if i == stallAt {
					tm += 150
				}
			}
			r.ChunkNS = append(r.ChunkNS, ns(tm))
		}
		r.EndNS = ns(tm + 1)
		r.Server.DecodeNS = ns(tm - first)
		recs = append(recs, r)
	}
	return recs
}

func TestPrefillInterference(t *testing.T) {
	build := interferenceRecords
	for _, aligned := range []bool{true, false} {
		c := NewCollector(Options{})
		for _, r := range build(aligned) {
			c.Add(r)
		}
		rep := c.Report()
		k := slices.IndexFunc(rep.Findings, func(f Finding) bool { return f.Rule == RulePrefillInterference })
		if (k >= 0) != aligned {
			t.Fatalf("aligned=%v: rule fired = %v; findings %+v", aligned, k >= 0, rep.Findings)
		}
		if k >= 0 {
			t.Log(rep.Findings[k].Evidence)
			if !strings.Contains(rep.Findings[k].Evidence, "overlap another request's prefill") {
				t.Errorf("evidence: %s", rep.Findings[k].Evidence)
			}
		}
	}
}

// noSplit drops the server's stage split from every request, as a server
// that sends no Server-Timing would.
func noSplit(reqs []synthReq) []synthReq {
	out := slices.Clone(reqs)
	for i := range out {
		out[i].split = false
	}
	return out
}

// TestRulesWithoutSplit covers the branches of server-queueing and
// prefill-bound that judge TTFT alone when the server gave no stage split.
func TestRulesWithoutSplit(t *testing.T) {
	tests := []struct {
		rule    string
		opts    Options
		reqs    []synthReq
		want    bool
		mention string
	}{
		{"server-queueing", Options{}, noSplit(overloadRun(200)), true, "no stage split, but TTFT grows"},
		{"server-queueing", Options{}, noSplit(baseline(300, 10, 1)), false, ""},
		{"prefill-bound", Options{}, noSplit(prefillRun(200)), true, "no stage split, but TTFT rises with the prompt"},
		{"prefill-bound", Options{}, noSplit(baseline(300, 10, 1)), false, ""},
	}
	for i, tt := range tests {
		t.Run(fmt.Sprintf("%d-%s-%v", i, tt.rule, tt.want), func(t *testing.T) {
			rep := collect(tt.opts, tt.reqs)
			if rep.Summary.ServerSplit != 0 {
				t.Fatalf("%d requests carry a split, want none", rep.Summary.ServerSplit)
			}
			k := findingIndex(rep, tt.rule)
			if got := k >= 0; got != tt.want {
				t.Fatalf("rule %s fired = %v, want %v; findings: %+v", tt.rule, got, tt.want, rep.Findings)
			}
			if k >= 0 && !strings.Contains(rep.Findings[k].Evidence, tt.mention) {
				t.Errorf("evidence lacks %q:\n%s", tt.mention, rep.Findings[k].Evidence)
			}
		})
	}
}

// TestRuleSeverity checks the severity each rule gives: the table in
// docs/report.md marks which findings are critical.
func TestRuleSeverity(t *testing.T) {
	fewErrors := baseline(300, 10, 8)
	fewErrors[5].err = latency.FailTimeout // 1 of 300: under 1 %
	manyErrors := baseline(300, 10, 8)
	for i := range 6 {
		manyErrors[i*40].err = latency.FailHTTP5xx // 6 of 300: 2 %
	}
	bursty := baseline(300, 10, 12)
	for i := range bursty {
		bursty[i].at = float64(i/20) * 2000
		bursty[i].sq = float64(i%20) * 60
	}
	tests := []struct {
		name, rule string
		opts       Options
		reqs       []synthReq
		run        *results.RunInfo
		want       string
	}{
		{"errors under 1%", "errors", Options{}, fewErrors, nil, "warning"},
		{"errors from 1%", "errors", Options{}, manyErrors, nil, "critical"},
		{"overloaded queue", "server-queueing", Options{SLOs: mustSLOs(t, "ttft:p99<=1s")}, overloadRun(200), nil, "critical"},
		{"bursty queue", "server-queueing", Options{SLOs: mustSLOs(t, "ttft:p99<=300ms")}, bursty, nil, "warning"},
		{"overhead floor", "client-bottleneck", Options{}, baseline(300, 10, 1),
			&results.RunInfo{OverheadFloor: 8 * time.Millisecond}, "critical"},
		{"warnings only", "client-bottleneck", Options{}, baseline(300, 10, 1),
			&results.RunInfo{Warnings: []string{"CPU 95%"}}, "info"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := collectRun(tt.opts, tt.run, tt.reqs)
			k := findingIndex(rep, tt.rule)
			if k < 0 {
				t.Fatalf("rule %s did not fire; findings: %+v", tt.rule, rep.Findings)
			}
			if got := rep.Findings[k].Severity; got != Severity(tt.want) {
				t.Errorf("severity %q, want %q: %s", got, tt.want, rep.Findings[k].Evidence)
			}
		})
	}
}

// TestServerQueueingWholeAnswers: answers that come whole (no first-token
// instant, no split) still show an overloaded server's growing queue.
func TestServerQueueingWholeAnswers(t *testing.T) {
	for _, tt := range []struct {
		reqs []synthReq
		want bool
	}{{noSplit(overloadRun(200)), true}, {noSplit(baseline(300, 10, 1)), false}} {
		c := NewCollector(Options{})
		for j, s := range tt.reqs {
			r := s.record(j)
			r.Stream, r.FirstTokenNS, r.ChunkNS, r.ChunkTokens = false, 0, nil, nil
			c.Add(r)
		}
		rep := c.Report()
		k := findingIndex(rep, "server-queueing")
		if (k >= 0) != tt.want {
			t.Errorf("server-queueing fired = %v, want %v; findings %+v", k >= 0, tt.want, rep.Findings)
		}
	}
}

// A reasoning model whose 400 reasoning tokens at 10 ms each dwarf a
// 25 ms prefill: reasoning-phase fires, names the share and is what
// explains a failed ttft_answer SLO; the same run without reasoning, or
// with a short reasoning phase, does not fire it. Report leads with TTFT
// and ttft_answer side by side.
func TestReasoningPhaseRule(t *testing.T) {
	long := baseline(200, 5, 21)
	short := baseline(200, 5, 21)
	for i := range long {
		long[i].output, long[i].reasoning, long[i].tpot = 450, 400, 10
		short[i].output, short[i].reasoning, short[i].tpot = 450, 1, 10
	}
	slos := mustSLOs(t, "ttft_answer:p99<=1s")
	rep := collect(Options{SLOs: slos}, long)
	k := findingIndex(rep, "reasoning-phase")
	if k < 0 {
		t.Fatalf("no reasoning-phase finding: %+v", rep.Findings)
	}
	f := rep.Findings[k]
	if f.Severity != "critical" || f.Numbers["reasoning_share"] < 0.9 || f.Numbers["reasoning_tokens_p50"] != 400 ||
		!strings.Contains(f.Evidence, "not prefill") {
		t.Errorf("finding %+v", f)
	}
	if findingIndex(rep, "slo-breach") >= 0 {
		t.Error("the ttft_answer breach is explained by reasoning-phase, yet slo-breach fired")
	}
	var ttft, answer float64
	for _, d := range rep.Metrics {
		switch d.Metric {
		case "ttft":
			ttft = d.P50
		case "ttft_answer":
			answer = d.P50
		}
	}
	if ttft <= 0 || answer < ttft+3900 || answer > ttft+4100 {
		t.Errorf("ttft P50 %.1f ms, ttft_answer P50 %.1f ms: want 400 reasoning tokens of 10 ms between them", ttft, answer)
	}
	for name, run := range map[string][]synthReq{"short": short, "none": baseline(200, 5, 21)} {
		if rep := collect(Options{}, run); findingIndex(rep, "reasoning-phase") >= 0 {
			t.Errorf("%s reasoning: reasoning-phase fired", name)
		}
	}
}

// serialRun is a closed loop of 4 workers on a server that serves one
// request at a time, first come first served: each request takes 100 ms
// to its first token and 9 × 10 ms after it (S = 190 ms); request k is sent
// when request k−4 ends and starts when request k−1 ends.
func serialRun(n int, serial bool) []synthReq {
	const s = 190.0
	out := make([]synthReq, n)
	for k := range out {
		r := synthReq{prefill: 100, tpot: 10, input: 100, output: 10}
		if serial {
			r.at, r.sq = max(0, float64(k-3)*s), float64(k)*s-max(0, float64(k-3)*s)
		} else {
			r.at = float64(k/4) * s // four served together
		}
		out[k] = r
	}
	return out
}

// slowFirstSerial is serialRun's server with a first request that takes
// 2 s to its first token (a model load): every request after it waits,
// so the least TTFT is itself a wait. Request k is sent at the end of
// request k−4 (at 0 for the first four) and starts when request k−1 ends.
func slowFirstSerial(n int) []synthReq {
	out := make([]synthReq, n)
	ends := make([]float64, n)
	for k := range out {
		at := 0.0
		if k >= 4 {
			at = ends[k-4]
		}
		start := at
		if k > 0 {
			start = max(at, ends[k-1])
		}
		prefill := 100.0
		if k == 0 {
			prefill = 2000
		}
		out[k] = synthReq{at: at, sq: start - at, prefill: prefill, tpot: 10, input: 100, output: 10}
		ends[k] = start + prefill + 90
	}
	slices.SortFunc(out, func(x, y synthReq) int { return cmp.Compare(x.at, y.at) })
	return out
}

// TestOneAtATimeWhenEveryRequestWaited checks slowFirstSerial(40): the
// least TTFT is a wait (the steady state's 3 × 190 + 100 = 670 ms), and the
// mean TTFT is not 3 times it, but the answers stream one at a time, so
// each request's first token once served is read from the end of the
// answer before it (100 ms) and the queue is named one at a time.
func TestOneAtATimeWhenEveryRequestWaited(t *testing.T) {
	rep := collect(Options{}, slowFirstSerial(40))
	k := findingIndex(rep, "server-queueing")
	if k < 0 {
		t.Fatalf("no queueing finding: %+v", rep.Findings)
	}
	f := rep.Findings[k]
	if got := f.Numbers["ttft_least_ms"]; got < 99.99 || got > 100.01 {
		t.Errorf("first token once served %v ms, want 100", got)
	}
	if got := f.Numbers["streaming_at_once"]; got < 0.999 || got > 1.001 {
		t.Errorf("streaming at once %v, want 1", got)
	}
	if f.Title != "Requests are served one at a time: the rest wait in a queue" || !strings.Contains(f.Evidence, "one at a time") {
		t.Errorf("finding %q: %s", f.Title, f.Evidence)
	}
	if rep := collect(Options{}, serialRun(40, false)); findingIndex(rep, "server-queueing") >= 0 {
		t.Errorf("four served together named as queueing: %+v", rep.Findings)
	}
}

// TestQueueFromTheRunsShape checks the Little's-law figures by hand on
// serialRun(40): TTFT 100 + k × 190 ms for the first four, 670 ms after
// (mean 25,660 / 40 = 641.5 ms); E2E (k+1) × 190 ms for the first four,
// 760 ms after (mean 731.5 ms); completions 1 / 190 ms. In flight
// 731.5 / 190 = 3.85; served at once (100 + 90) / 190 = 1; waiting 2.85.
func TestQueueFromTheRunsShape(t *testing.T) {
	rep := collect(Options{}, serialRun(40, true))
	k := findingIndex(rep, "server-queueing")
	if k < 0 {
		t.Fatalf("no queueing finding: %+v", rep.Findings)
	}
	f := rep.Findings[k]
	near := func(name string, want float64) {
		if got := f.Numbers[name]; got < want-0.005 || got > want+0.005 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("in_flight_mean", 3.85)
	near("served_at_once", 1)
	near("waiting_mean", 2.85)
	near("ttft_mean_ms", 641.5)
	near("ttft_least_ms", 100)
	if f.Title != "Requests are served one at a time: the rest wait in a queue" ||
		!strings.Contains(f.Evidence, "is unknown") || !strings.Contains(f.Evidence, "Little's law") {
		t.Errorf("finding %q: %s", f.Title, f.Evidence)
	}
	if rep := collect(Options{}, serialRun(40, false)); findingIndex(rep, "server-queueing") >= 0 {
		t.Errorf("four served together named as queueing: %+v", rep.Findings)
	}
}
