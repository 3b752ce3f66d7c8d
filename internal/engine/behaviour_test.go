package engine

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// Behaviour tests: the engine on the real performance model, in virtual
// time. Latency must emerge from batching and memory as in vLLM.

func perfConfig(t *testing.T, gpu string, base Config) Config {
	t.Helper()
	if base.MaxModelLen == 0 {
		base.MaxModelLen = 16384
	}
	cfg, _, err := PerfConfig(base, "Llama-3.1-8B", gpu, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func simulate(t *testing.T, cfg Config, arr []Arrival, opts SimOptions) *SimResult {
	t.Helper()
	res, err := Simulate(cfg, arr, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func ttft(tl Timeline) time.Duration { return tl.FirstToken.Sub(tl.Arrival) }

func tpot(tl Timeline) time.Duration {
	return tl.Decode() / time.Duration(max(tl.OutputTokens-1, 1))
}

func TestBehaviourTTFTGrowsWithInput(t *testing.T) {
	cfg := perfConfig(t, "H100-SXM", Config{})
	var prev time.Duration
	for _, in := range []int{128, 1024, 4096, 16000} {
		res := simulate(t, cfg, []Arrival{{Request: Request{PromptLen: in, MaxTokens: 1}}}, SimOptions{})
		got := ttft(res.Timelines[0])
		t.Logf("input %5d: TTFT %v", in, got)
		if got <= prev {
			t.Fatalf("TTFT %v at input %d is not above %v", got, in, prev)
		}
		prev = got
	}
}

func TestBehaviourTPOTGrowsWithBatchAndContext(t *testing.T) {
	cfg := perfConfig(t, "H100-SXM", Config{})
	meanTPOT := func(batch, input int) time.Duration {
		arr := make([]Arrival, batch)
		for i := range arr {
			arr[i] = Arrival{Request: Request{PromptLen: input, MaxTokens: 128, IgnoreEOS: true}}
		}
		res := simulate(t, cfg, arr, SimOptions{})
		var sum time.Duration
		for _, tl := range res.Timelines {
			sum += tpot(tl)
		}
		return sum / time.Duration(batch)
	}
	var prev time.Duration
	for _, b := range []int{1, 16, 64, 256} {
		got := meanTPOT(b, 512)
		t.Logf("batch %3d, input 512: TPOT %v", b, got)
		if got <= prev {
			t.Fatalf("TPOT %v at batch %d is not above %v", got, b, prev)
		}
		prev = got
	}
	prev = 0
	for _, in := range []int{256, 2048, 8192} {
		got := meanTPOT(32, in)
		t.Logf("batch 32, input %4d: TPOT %v", in, got)
		if got <= prev {
			t.Fatalf("TPOT %v at input %d is not above %v", got, in, prev)
		}
		prev = got
	}
}

// maxITL is the longest gap between consecutive emissions of request i
// after the first token.
func maxITL(res *SimResult, i int) time.Duration {
	var m time.Duration
	em := res.Emissions[i]
	for j := 1; j < len(em); j++ {
		m = max(m, em[j].At-em[j-1].At)
	}
	return m
}

func TestBehaviourChunkedPrefillShrinksTPOTSpike(t *testing.T) {
	// 32 decoding requests; a 12,000-token prompt arrives among them. With
	// whole-prompt scheduling one step carries the entire prompt and every
	// decode stalls for it; chunks of the 2,048-token budget spread it.
	spike := func(chunked bool) (time.Duration, time.Duration) {
		cfg := perfConfig(t, "A100-80GB-SXM", Config{DisableChunkedPrefill: !chunked})
		var arr []Arrival
		for range 32 {
			arr = append(arr, Arrival{Request: Request{PromptLen: 256, MaxTokens: 600, IgnoreEOS: true}})
		}
		arr = append(arr, Arrival{At: 2 * time.Second, Request: Request{PromptLen: 12000, MaxTokens: 10, IgnoreEOS: true}})
		res := simulate(t, cfg, arr, SimOptions{Emissions: true})
		var worst, typical time.Duration
		for i := range 32 {
			worst = max(worst, maxITL(res, i))
			typical += tpot(res.Timelines[i])
		}
		return worst, typical / 32
	}
	off, offTPOT := spike(false)
	on, onTPOT := spike(true)
	t.Logf("max ITL of the decodes: chunked off %v (mean TPOT %v), on %v (mean TPOT %v)", off, offTPOT, on, onTPOT)
	if off < 5*offTPOT {
		t.Fatalf("no spike without chunking: max ITL %v vs TPOT %v", off, offTPOT)
	}
	if on*2 > off {
		t.Fatalf("chunked prefill spike %v is not under half the unchunked %v", on, off)
	}
}

func TestBehaviourPrefixCachingCutsTTFT(t *testing.T) {
	// Requests share a 3,000-token system prompt, then 50 tokens of their
	// own; one arrives every 500 ms (no queueing).
	sys := make([]int32, 3000)
	for i := range sys {
		sys[i] = int32(i % 5000)
	}
	var arr []Arrival
	for i := range 20 {
		p := append(append([]int32(nil), sys...), make([]int32, 50)...)
		for j := range 50 {
			p[3000+j] = int32(10000 + i*50 + j)
		}
		arr = append(arr, Arrival{At: time.Duration(i) * 500 * time.Millisecond, Request: Request{Prompt: p, MaxTokens: 20, IgnoreEOS: true}})
	}
	meanTTFT := func(caching bool) (time.Duration, Stats) {
		cfg := perfConfig(t, "H100-SXM", Config{EnablePrefixCaching: caching})
		res := simulate(t, cfg, arr, SimOptions{})
		var sum time.Duration
		for _, tl := range res.Timelines[1:] {
			sum += ttft(tl)
		}
		return sum / time.Duration(len(arr)-1), res.Stats
	}
	off, _ := meanTTFT(false)
	on, st := meanTTFT(true)
	t.Logf("mean TTFT after the first request: caching off %v, on %v; hits %d of %d tokens", off, on, st.PrefixHits, st.PrefixQueries)
	if on*3 > off {
		t.Fatalf("prefix caching TTFT %v is not under a third of %v", on, off)
	}
	if want := int64(19 * 2992); st.PrefixHits != want { // 187 full blocks of the system prompt
		t.Fatalf("prefix hits %d tokens, want %d", st.PrefixHits, want)
	}
}

func TestBehaviourQueueingExplodesPastCapacity(t *testing.T) {
	cfg := perfConfig(t, "H100-SXM", Config{})
	req := Request{PromptLen: 1024, MaxTokens: 256, IgnoreEOS: true}
	// Capacity: the completion rate of a saturated engine.
	n := 3000
	arr := make([]Arrival, n)
	for i := range arr {
		arr[i] = Arrival{Request: req}
	}
	sat := simulate(t, cfg, arr, SimOptions{})
	capacity := float64(n) / sat.End.Seconds()
	meanQueue := func(load float64) (all, lastTenth time.Duration) {
		rng := rand.New(rand.NewPCG(1, 2))
		var at time.Duration
		for i := range arr {
			at += time.Duration(rng.ExpFloat64() / (load * capacity) * float64(time.Second))
			arr[i] = Arrival{At: at, Request: req}
		}
		res := simulate(t, cfg, arr, SimOptions{})
		for i, tl := range res.Timelines {
			all += tl.Queue()
			if i >= n*9/10 {
				lastTenth += tl.Queue()
			}
		}
		return all / time.Duration(n), lastTenth / time.Duration(n/10)
	}
	var prev time.Duration
	var results []time.Duration
	for _, load := range []float64{0.5, 0.8, 1.2, 1.5} {
		q, last := meanQueue(load)
		t.Logf("load %.1f × capacity (%.1f req/s): mean queue %v, last tenth %v", load, capacity, q, last)
		if q < prev {
			t.Fatalf("queueing fell from %v to %v as load rose to %.1f", prev, q, load)
		}
		prev = q
		results = append(results, q)
	}
	if results[3] < 50*max(results[0], time.Millisecond) {
		t.Fatalf("past capacity the queue (%v) did not explode relative to half load (%v)", results[3], results[0])
	}
}

func TestBehaviourSpeculativeHelpsAtHighAlphaHurtsAtLow(t *testing.T) {
	// Llama-3.1-70B on 4 × H100 with Llama-3.1-8B drafting k = 4 tokens.
	target, err := perfmodel.ResolveModel("Llama-3.1-70B")
	if err != nil {
		t.Fatal(err)
	}
	draft, err := perfmodel.ResolveModel("Llama-3.1-8B")
	if err != nil {
		t.Fatal(err)
	}
	gpu, err := perfmodel.LookupGPU("H100-SXM")
	if err != nil {
		t.Fatal(err)
	}
	est, err := perfmodel.New(perfmodel.Config{Model: target, GPU: gpu, TP: 4, DraftModel: &draft})
	if err != nil {
		t.Fatal(err)
	}
	meanTPOT := func(spec Speculative) time.Duration {
		cfg := FromEstimator(Config{MaxModelLen: 8192, Speculative: spec, Seed: 1}, est)
		arr := make([]Arrival, 8)
		for i := range arr {
			arr[i] = Arrival{Request: Request{PromptLen: 512, MaxTokens: 256, IgnoreEOS: true}}
		}
		res := simulate(t, cfg, arr, SimOptions{})
		var sum time.Duration
		for _, tl := range res.Timelines {
			sum += tpot(tl)
		}
		return sum / time.Duration(len(arr))
	}
	off := meanTPOT(Speculative{})
	high := meanTPOT(Speculative{K: 4, Alpha: 0.9})
	low := meanTPOT(Speculative{K: 4, Alpha: 0.1})
	t.Logf("TPOT: no speculation %v, k=4 α=0.9 %v, k=4 α=0.1 %v", off, high, low)
	if !(high < off && off < low) {
		t.Fatalf("want α=0.9 (%v) < off (%v) < α=0.1 (%v)", high, off, low)
	}
}

func TestBehaviourPreemptionUnderKVPressure(t *testing.T) {
	// Llama-3.1-8B on an L4 (24 GB) leaves a small KV cache: 64 requests of
	// 2,000 + 1,000 tokens cannot all stay resident, so decodes preempt the
	// newest requests, which recompute later. Everything still finishes,
	// and the cache is never over capacity.
	cfg := perfConfig(t, "L4", Config{MaxModelLen: 4096})
	var arr []Arrival
	for i := range 64 {
		arr = append(arr, Arrival{At: time.Duration(i) * 10 * time.Millisecond, Request: Request{PromptLen: 2000, MaxTokens: 1000, IgnoreEOS: true}})
	}
	res := simulate(t, cfg, arr, SimOptions{Steps: true})
	t.Logf("%d blocks; %d preemptions; makespan %v", cfg.NumBlocks, res.Stats.Preemptions, res.End)
	if res.Stats.Preemptions == 0 {
		t.Fatalf("no preemption with %d blocks for 64 × 3,000 tokens", cfg.NumBlocks)
	}
	for i, tl := range res.Timelines {
		if tl.OutputTokens != 1000 || tl.Finish != FinishLength {
			t.Fatalf("request %d: %+v", i, tl)
		}
	}
	peak := 0
	for _, st := range res.Steps {
		peak = max(peak, st.UsedBlocks)
	}
	if peak > cfg.NumBlocks {
		t.Fatalf("peak %d blocks > capacity %d", peak, cfg.NumBlocks)
	}
	if peak < cfg.NumBlocks*9/10 {
		t.Fatalf("peak %d blocks: the cache was never nearly full (%d)", peak, cfg.NumBlocks)
	}
}
