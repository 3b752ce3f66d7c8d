package perfmodel

import (
	"math"
	"os"
	"testing"
	"time"
)

// cpuDevice reads the test machine's CPU thread from llamacpptest's device
// file (the one the llama.cpp tests and docs use).
func cpuDevice(t *testing.T) GPU {
	t.Helper()
	data, err := os.ReadFile("../llamacpptest/testdata/cpu.yaml")
	if err != nil {
		t.Fatal(err)
	}
	gs, err := ParseGPUCatalog(data)
	if err != nil {
		t.Fatal(err)
	}
	return gs[0]
}

// One decode of llama.cpp's test model (2 layers, 256 wide, 4 heads, 2 KV
// heads of 64, FFN 512, vocabulary 32,000, f16) at context 100 on one
// thread of the test machine (112 GFLOP/s FMA peak, 26.6 GB/s from DRAM,
// 85.1 GB/s from its 32 MiB L3), with the cpu family's defaults (compute
// 0.47, memory 0.9, 50 µs per step and per sequence), by hand:
//
//	linear params   2 × (256·256 + 2·256·128 + 256·256 + 3·256·512) = 1,179,648, norms 2·2·256 + 256 = 1,280
//	FLOPs           2 × (1,179,648 + 1,280) + 2 × 32,000 × 256 (one logit row) + 2 layers × 4·4·64 × 101 pairs
//	                = 2,361,856 + 16,384,000 + 206,848 = 18,952,704 → ÷ (112e9 × 0.47) = 360.04 µs
//	bytes           2 × (1,179,648 + 1,280 + 8,192,000) weights (the embedding is gathered, not read)
//	                + 101 × 1,024 KV (2 · 2 layers · 2 heads · 64 · 2 B per token) = 18,849,280,
//	                within the L3's 33,554,432 → ÷ (85.1e9 × 0.9) = 246.11 µs (from DRAM it would be 787.36)
//	step            max(360.04, 246.11) + 50 + 50 = 460.04 µs, compute-bound
//
// Four such decodes: FLOPs 4 × 18,952,704 = 75,810,816 → 1,440.16 µs,
// bytes 18,749,440 + 404 × 1,024 = 19,163,136 → 250.21 µs: compute-bound,
// 1,440.16 + 50 + 4 × 50 = 1,690.16 µs — on a CPU thread a batch of four
// already costs FLOPs, where a GPU's decode stays memory-bound into the
// hundreds.
func TestCPUDecodeHandComputed(t *testing.T) {
	g := cpuDevice(t)
	if g.Family != "cpu" || DefaultEfficiency(g) != familyEfficiency["cpu"] {
		t.Fatalf("device family %q: defaults %+v", g.Family, DefaultEfficiency(g))
	}
	m := ModelSpec{Name: "llamacpp-test", Layers: 2, Hidden: 256, Heads: 4, KVHeads: 2, HeadDim: 64, Intermediate: 512, Vocab: 32000}
	e := mustNew(t, Config{Model: m, GPU: g, WeightDType: FP16, KVDType: FP16})
	for _, tc := range []struct {
		seqs  int
		want  time.Duration
		bound string
	}{{1, 460040 * time.Nanosecond, "compute"}, {4, 1690160 * time.Nanosecond, "compute"}} {
		var b Batch
		for range tc.seqs {
			b.AddDecode(1, 100)
		}
		s := e.Breakdown(&b)
		if !s.Cached {
			t.Errorf("%d decodes: the model's 18.8 MB were not read from the 32 MiB L3", tc.seqs)
		}
		if d := s.Total - tc.want; d < -time.Microsecond || d > time.Microsecond || s.Bound != tc.bound {
			t.Errorf("%d decodes: %v (%s-bound; compute %v, memory %v), want %v %s-bound", tc.seqs, s.Total, s.Bound, s.Compute, s.Memory, tc.want, tc.bound)
		}
	}
}

// The L3 holds a model only when one pass's bytes fit in it: llama.cpp's
// reference model (10 layers, 640 wide, 152 MB in f16) reads its weights
// from DRAM on every decode, the test model (18.8 MB) from the cache; a
// device without a cache (every GPU entry) reads from its memory, as
// before the cache was modelled.
func TestCPUCacheHoldsOnlyWhatFits(t *testing.T) {
	g := cpuDevice(t)
	small := ModelSpec{Name: "llamacpp-test", Layers: 2, Hidden: 256, Heads: 4, KVHeads: 2, HeadDim: 64, Intermediate: 512, Vocab: 32000}
	ref := ModelSpec{Name: "llamacpp-reference", Layers: 10, Hidden: 640, Heads: 10, KVHeads: 2, HeadDim: 64, Intermediate: 1280, Vocab: 32000}
	noCache := g
	noCache.CacheBytes, noCache.CacheBandwidth = 0, 0
	eff := DefaultEfficiency(g)
	for _, tc := range []struct {
		name   string
		model  ModelSpec
		gpu    GPU
		cached bool
		bw     float64
	}{
		{"test model, L3", small, g, true, g.CacheBandwidth},
		{"reference model, larger than the L3", ref, g, false, g.HBMBandwidth},
		{"test model, device without a cache", small, noCache, false, g.HBMBandwidth},
	} {
		e := mustNew(t, Config{Model: tc.model, GPU: tc.gpu, WeightDType: FP16, KVDType: FP16})
		var b Batch
		b.AddDecode(1, 100)
		s := e.Breakdown(&b)
		want := s.Bytes / (tc.bw * eff.Memory)
		if s.Cached != tc.cached || math.Abs(s.Memory.Seconds()-want) > 1e-9 {
			t.Errorf("%s: cached %v, memory %v; want cached %v, %v", tc.name, s.Cached, s.Memory, tc.cached, seconds(want))
		}
	}
}

// llama-server's own step times on the test model (TestCalibrateThenSimulate
// AgainstLlamaServer's run of 2026-12-04 18:10 UTC, load average 6–8, its
// timings.prompt_ms and predicted_per_token_ms; docs/performance.md, "A CPU
// thread as the device"): the 91-token prompt alone 3.98 ms, a decode
// 0.83 ms per sequence at batch 1 and at batch 4. With the L3 the roofline
// prices all three with one compute efficiency; with DRAM as the only
// memory no constants come within 15 % of all three, because one decode
// alone would read 0.70 ms of weights at 26.6 GB/s and still be sampled.
func TestCPUStepsOneComputeEfficiency(t *testing.T) {
	g := cpuDevice(t)
	m := ModelSpec{Name: "llamacpp-test", Layers: 2, Hidden: 256, Heads: 4, KVHeads: 2, HeadDim: 64, Intermediate: 512, Vocab: 32000}
	steps := []struct {
		name     string
		batch    func(*Batch)
		measured time.Duration
	}{
		{"91-token prompt alone", func(b *Batch) { b.Add(91, 0) }, 3980 * time.Microsecond},
		{"1 decode", func(b *Batch) { b.AddDecode(1, 107) }, 830 * time.Microsecond},
		{"4 decodes", func(b *Batch) {
			for range 4 {
				b.AddDecode(1, 107)
			}
		}, 4 * 830 * time.Microsecond},
	}
	// worst is the largest relative miss of the three steps.
	worst := func(g GPU, eff Efficiency) float64 {
		e := mustNew(t, Config{Model: m, GPU: g, WeightDType: FP16, KVDType: FP16, Eff: eff})
		var w float64
		for _, s := range steps {
			var b Batch
			s.batch(&b)
			w = max(w, math.Abs(float64(e.StepTime(&b))/float64(s.measured)-1))
		}
		return w
	}
	// Fitted by hand on these three: compute 0.63, memory 0.85, 561 µs per
	// sequence (sampling 32,000 logits and the slot's bookkeeping).
	fit := Efficiency{Compute: 0.63, Memory: 0.85, Interconnect: 1, StepOverhead: time.Microsecond, SeqOverhead: 561 * time.Microsecond}
	if w := worst(g, fit); w > 0.01 {
		t.Errorf("with the L3, %+v misses a step by %.1f %%, want within 1 %%", fit, 100*w)
	}
	dram := g
	dram.CacheBytes, dram.CacheBandwidth = 0, 0
	best, at := math.Inf(1), Efficiency{}
	for c := 0.05; c <= 1.0001; c += 0.01 {
		for mem := 0.5; mem <= 1.0001; mem += 0.1 {
			for seq := time.Duration(0); seq <= 1500*time.Microsecond; seq += 20 * time.Microsecond {
				eff := Efficiency{Compute: min(c, 1), Memory: min(mem, 1), Interconnect: 1, StepOverhead: time.Microsecond, SeqOverhead: seq}
				if w := worst(dram, eff); w < best {
					best, at = w, eff
				}
			}
		}
	}
	if best < 0.15 {
		t.Errorf("from DRAM alone, %+v prices all three steps within %.1f %%: the L3 would not be needed", at, 100*best)
	}
	t.Logf("from DRAM alone the best constants (%+v) miss a step by %.1f %%", at, 100*best)
}
