package report

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/tokentrace/tokentrace/internal/results"
)

// The server's evidence over a run, by hand: counters from the first to
// the last sample (preemptions 7 → 19: 12; prefix-cache queries 1,000 →
// 3,000 and hits 10 → 1,010: 1,000 of 2,000 tokens, a share of 0.5), peaks
// over every sample, the mean of running (0, 4, 2: 2).
func TestServerEvidenceByHand(t *testing.T) {
	c := NewCollector(Options{})
	c.SetRun(results.RunInfo{Server: &results.ServerInfo{Engine: "vllm", Series: []string{"running", "waiting", "kv_cache_usage",
		"preemptions", "prefix_cache"}, Config: map[string]string{"enable_prefix_caching": "True", "block_size": "16"}},
		Samples: []results.ServerSample{
			{AtNS: 0, Preemptions: 7, PrefixQueries: 1000, PrefixHits: 10, KVCacheUsage: 0.2},
			{AtNS: 1e9, Running: 4, Waiting: 9, Preemptions: 15, PrefixQueries: 2000, PrefixHits: 500, KVCacheUsage: 0.97},
			{AtNS: 2e9, Running: 2, Preemptions: 19, PrefixQueries: 3000, PrefixHits: 1010, KVCacheUsage: 0.5},
		}})
	ev := c.analyse().ev
	share, ok := ev.prefixCacheShare()
	got := []float64{ev.preemptions, ev.prefixQueries, ev.prefixHits, share, ev.kvPeak, ev.waitingPeak, ev.runningMean}
	if diff := cmp.Diff([]float64{12, 2000, 1000, 0.5, 0.97, 9, 2}, got); diff != "" || !ok {
		t.Errorf("evidence (-want +got):\n%s", diff)
	}
	if on, known := ev.on("enable_prefix_caching"); !on || !known {
		t.Error("vLLM's True not read as on")
	}
	if !ev.preempting() || ev.noPreemption() {
		t.Error("12 preemptions not read as preempting")
	}
}

// The prefill cost per token, by hand: request A prefills 4,000 tokens
// alone in 100 ms (0.025 ms per token); B and C prefill 4,000 tokens each
// in one 200 ms window (each window's 200 ms over the 8,000 tokens computed
// beside it: 0.025). The median is 0.025 ms per token, 25 ms per 1k.
func TestPrefillCostByHand(t *testing.T) {
	reqs := []synthReq{
		{at: 0, prefill: 100, input: 4000, output: 2, tpot: 10, split: true},
		{at: 1000, prefill: 200, input: 4000, output: 2, tpot: 10, split: true},
		{at: 1000, prefill: 200, input: 4000, output: 2, tpot: 10, split: true},
	}
	c := NewCollector(Options{})
	for i, r := range reqs {
		c.Add(r.record(i))
	}
	cost, ok := c.analyse().prefillCost()
	if !ok || math.Abs(cost-0.025) > 1e-9 {
		t.Errorf("cost %v ms per token, want 0.025", cost)
	}
}

// Stalls against prefills, by hand: one prefill window [2 s, 4 s] in a run
// spanning [0, 10 s]; three stalls of 1.01 s (a 10 ms step plus 1 s):
// [2.3 s, 3.31 s] and [2.76 s, 3.77 s] inside the window, [7 s, 8.01 s]
// outside. A stall of the median length L = 1.01 s starting at s is half
// covered for s in [2 − L/2, 4 − L/2]: 2 s of the 8.99 s of possible
// starts, chance 2/8.99 = 0.2225. Two of three overlap: p = P(X ≥ 2),
// X ~ Binomial(3, c) = 3c²(1 − c) + c³ = 0.1266.
func TestStallOverlapByHand(t *testing.T) {
	reqs := []synthReq{
		// The long prompt: its prefill window is [2 s, 4 s].
		{at: 2000, prefill: 2000, input: 8000, output: 2, tpot: 10, split: true},
		// Decoders, first token 10 ms after the send, a token every 10 ms,
		// one 1 s stall after the chunk at index stallAt − 1.
		{at: 0, prefill: 10, input: 100, output: 400, tpot: 10, stallAt: 230, stall: 1000, split: true},
		{at: 500, prefill: 10, input: 100, output: 400, tpot: 10, stallAt: 226, stall: 1000, split: true},
		{at: 5000, prefill: 10, input: 100, output: 400, tpot: 10, stallAt: 200, stall: 1000, split: true},
	}
	c := NewCollector(Options{})
	for i, r := range reqs {
		c.Add(r.record(i))
	}
	a := c.analyse()
	o, ok := a.stallOverlap(500e6, 1500e6)
	want := overlap{stalls: 3, overlapping: 2, chance: 2.0 / 8.99}
	want.p = 3*want.chance*want.chance*(1-want.chance) + math.Pow(want.chance, 3)
	opts := []cmp.Option{cmp.AllowUnexported(overlap{}), cmpopts.EquateApprox(0, 0.002),
		cmpopts.IgnoreFields(overlap{}, "stall", "tokens", "msPerToken")}
	if diff := cmp.Diff(want, o, opts...); diff != "" || !ok {
		t.Errorf("overlap (-want +got):\n%s", diff)
	}
	if got := binomialTail(3, 3, 0.5); got != 0.125 {
		t.Errorf("P(X ≥ 3 | 3, ½) = %v", got)
	}
	if got := binomialTail(10, 8, 0.5); math.Abs(got-56.0/1024) > 1e-12 {
		t.Errorf("P(X ≥ 8 | 10, ½) = %v, want 56/1024", got)
	}
}
