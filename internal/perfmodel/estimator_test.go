package perfmodel

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func mustModel(t testing.TB, name string) ModelSpec {
	t.Helper()
	m, err := LookupModel(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustGPU(t testing.TB, name string) GPU {
	t.Helper()
	g, err := LookupGPU(name)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func mustNew(t testing.TB, cfg Config) *Estimator {
	t.Helper()
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// Llama-3.1-8B in bf16: 2 (K and V) × 32 layers × 8 KV heads × 128 dims ×
// 2 bytes = 131,072 B = 128 KiB per token.
func TestKVBytesPerTokenHandComputed(t *testing.T) {
	h100 := mustGPU(t, "H100-SXM")
	tests := []struct {
		name  string
		model string
		tp    int
		kv    DType
		want  int64
	}{
		{"llama3.1-8b bf16", "Llama-3.1-8B", 1, BF16, 2 * 32 * 8 * 128 * 2},
		{"llama3.1-8b fp8", "Llama-3.1-8B", 1, FP8, 2 * 32 * 8 * 128 * 1},
		// TP 8 = KV heads: one head per rank, no replication.
		{"llama3.1-70b tp8", "Llama-3.1-70B", 8, BF16, 2 * 80 * 8 * 128 * 2},
		// Llama-2-7B is multi-head: 32 KV heads.
		{"llama2-7b mha", "Llama-2-7B", 1, BF16, 2 * 32 * 32 * 128 * 2},
		// Qwen2.5-7B has 4 KV heads: at TP 4 one per rank, no replication
		// (replication: TestKVHeadReplication).
		{"qwen2.5-7b tp4 (=kv heads)", "Qwen2.5-7B", 4, BF16, 2 * 28 * 4 * 128 * 2},
		// DeepSeek-V3 MLA: 61 layers × (512 latent + 64 rope) × 2 B, one copy per rank.
		{"deepseek-v3 mla tp8", "DeepSeek-V3", 8, BF16, 8 * 61 * (512 + 64) * 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := h100
			g.MemoryBytes = 1 << 50 // the test is about KV, not fit
			e := mustNew(t, Config{Model: mustModel(t, tt.model), GPU: g, TP: tt.tp, KVDType: tt.kv})
			if got := e.KVBytesPerToken(); got != tt.want {
				t.Errorf("KVBytesPerToken = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestKVHeadReplication(t *testing.T) {
	// A synthetic model with 2 KV heads at TP 4: each rank must hold one
	// head, so the group stores 4 heads' worth (each head twice).
	m := ModelSpec{Name: "tiny", Layers: 2, Hidden: 512, Heads: 8, KVHeads: 2, HeadDim: 64, Intermediate: 1024, Vocab: 1000}
	g := mustGPU(t, "H100-SXM")
	e1 := mustNew(t, Config{Model: m, GPU: g, TP: 1})
	e4 := mustNew(t, Config{Model: m, GPU: g, TP: 4})
	if e1.KVBytesPerToken() != 2*2*2*64*2 {
		t.Errorf("TP1: %d", e1.KVBytesPerToken())
	}
	if e4.KVBytesPerToken() != 2*2*4*64*2 { // 2 KV heads replicated to 4
		t.Errorf("TP4 with replication: %d", e4.KVBytesPerToken())
	}
}

func TestMoEExpectedExpertsTouched(t *testing.T) {
	m := mustModel(t, "Mixtral-8x7B")
	g := mustGPU(t, "H200")
	e := mustNew(t, Config{Model: m, GPU: g, TP: 2})
	// One token touches exactly k = 2 experts; 8 tokens: 8 × (1 − (6/8)^8) = 7.199.
	if got := e.DecodeStep(1, 100).ExpertsTouched; math.Abs(got-2) > 1e-9 {
		t.Errorf("1 token: %.4f experts, want 2", got)
	}
	if got := e.DecodeStep(8, 100).ExpertsTouched; math.Abs(got-8*(1-math.Pow(0.75, 8))) > 1e-9 {
		t.Errorf("8 tokens: %.4f experts", got)
	}
	// A large batch reads every expert, so its weight bytes approach the
	// whole model's (per GPU, without the input embedding).
	full := e.DecodeStep(512, 100).WeightBytes
	one := e.DecodeStep(1, 100).WeightBytes
	if !(full > 2.5*one) {
		t.Errorf("weights read at batch 512 (%.3g) should be far above batch 1 (%.3g)", full, one)
	}
}

// The design notes' worked example, corrected (docs/perfmodel.md).
func TestWorkedExampleLlama2_70B(t *testing.T) {
	m := mustModel(t, "Llama-2-70B")
	a100 := mustGPU(t, "A100-80GB-SXM")
	cfg := Config{Model: m, GPU: a100, TP: 1, WeightDType: FP16, KVDType: FP16, Eff: Roofline()}

	// It does not fit one 80 GB card: the error gives the numbers and TP 2.
	_, err := New(cfg)
	var nf *NoFitError
	if !errors.As(err, &nf) {
		t.Fatalf("New at TP 1: %v, want *NoFitError", err)
	}
	if nf.MinTP != 2 || nf.WeightBytes < 137e9 || nf.UsableBytes > 80e9 {
		t.Errorf("NoFitError = %+v", nf)
	}
	// 138.0e9 B = 128.5 GiB: memory in GiB, as the GPU catalog gives it.
	for _, want := range []string{"weights 128.5 GiB > usable 69.6 GiB", "smallest TP that fits: 2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if MinTP(cfg) != 2 {
		t.Errorf("MinTP = %d", MinTP(cfg))
	}

	// The notes' figures at TP 1 on an imaginary card with room for them.
	big := cfg
	big.GPU.MemoryBytes = 1 << 40
	e1 := mustNew(t, big)
	// Weights: 68.98 B params × 2 B = 138 GB ("about 140 GB").
	if w := float64(e1.WeightBytes()); math.Abs(w-137.95e9) > 0.1e9 {
		t.Errorf("weights %.2f GB, want 137.95", w/1e9)
	}
	// A decode step reads them all: 137.4 GB (no input embedding) / 2.039 TB/s
	// = 67.4 ms: the notes' "at least 70 ms" with 140 GB at 2 TB/s.
	dec := e1.DecodeStep(1, 512)
	if got := dec.Memory.Seconds() * 1e3; math.Abs(got-67.4) > 0.3 {
		t.Errorf("decode memory time %.2f ms, want ≈ 67.4", got)
	}
	if dec.Bound != "memory" {
		t.Errorf("decode bound %s", dec.Bound)
	}
	// The prefill: 2 FLOPs per parameter per token. With the nominal 70 B:
	// 2 × 70e9 × 512 = 71.7 TFLOP (the notes said 35.8, forgetting the 2).
	// The model counts 68.71 B multiplied params + attention: 70.44 TFLOP,
	// 226 ms at 312 TFLOP/s (the notes said 115 ms).
	pre := e1.PrefillStep(512)
	if got := pre.FLOPs / 1e12; math.Abs(got-70.44) > 0.02 {
		t.Errorf("prefill FLOPs %.2f T, want ≈ 70.44", got)
	}
	if got := pre.Compute.Seconds() * 1e3; math.Abs(got-226) > 1.5 {
		t.Errorf("prefill compute %.1f ms, want ≈ 226", got)
	}
	// TTFT at TP 1 would be ≈ 226 ms (compute-bound), not 185 ms.
	if got := pre.Total.Seconds() * 1e3; math.Abs(got-226) > 1.5 || pre.Bound != "compute" {
		t.Errorf("TTFT at TP1 %.1f ms (%s)", got, pre.Bound)
	}

	// At the smallest TP that fits, 2: half the FLOPs and bytes per GPU plus
	// 160 all-reduces of 512 × 8192 × 2 B = 8.39 MB: each 2(1/2) × 8.39 MB /
	// (300 GB/s × 0.7) = 40 µs, plus 10 µs + 2 ring steps of 0.5 µs → 4.63 ms.
	// TTFT = 113 + 4.6 = 117.7 ms; TPOT = 33.9 ms (with the 0.1 ms of the
	// one sequence's overhead).
	cfg.TP = 2
	e2 := mustNew(t, cfg)
	p2 := e2.PrefillStep(512)
	if got := p2.Comm.Seconds() * 1e3; math.Abs(got-4.63) > 0.02 {
		t.Errorf("TP2 comm %.3f ms, want 4.63", got)
	}
	if got := p2.Total.Seconds() * 1e3; math.Abs(got-117.7) > 1 {
		t.Errorf("TP2 TTFT %.1f ms, want ≈ 117.7", got)
	}
	if got := e2.DecodeStep(1, 512).Total.Seconds() * 1e3; math.Abs(got-33.9) > 0.3 {
		t.Errorf("TP2 decode %.2f ms, want ≈ 33.9", got)
	}
}

func TestSpeculativeDecoding(t *testing.T) {
	if got := ExpectedTokens(4, 0.8); math.Abs(got-(1-math.Pow(0.8, 5))/0.2) > 1e-12 {
		t.Errorf("E(4, .8) = %v", got)
	}
	if ExpectedTokens(4, 0) != 1 {
		t.Error("α = 0 yields 1 token")
	}
	g := mustGPU(t, "H100-SXM")
	draft := mustModel(t, "Llama-3.1-8B")
	e := mustNew(t, Config{Model: mustModel(t, "Llama-3.1-70B"), GPU: g, TP: 4, DraftModel: &draft})
	small, err := e.Estimate(Workload{Input: 512, Output: 256, Batch: 1, SpecK: 4, SpecAlpha: 0.8})
	if err != nil {
		t.Fatal(err)
	}
	if small.Spec.Speedup <= 1.3 {
		t.Errorf("batch 1, α 0.8: speed-up %.2f, want a clear gain", small.Spec.Speedup)
	}
	low, err := e.Estimate(Workload{Input: 512, Output: 256, Batch: 1, SpecK: 4, SpecAlpha: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	if low.Spec.Speedup >= 1 {
		t.Errorf("α 0.1: speed-up %.2f, want < 1 (draft cost not repaid)", low.Spec.Speedup)
	}
	big, err := e.Estimate(Workload{Input: 512, Output: 256, Batch: 256, SpecK: 4, SpecAlpha: 0.8})
	if err != nil {
		t.Fatal(err)
	}
	if big.Spec.Speedup >= small.Spec.Speedup || big.Spec.Bound != "compute" {
		t.Errorf("batch 256: speed-up %.2f (bound %s), want below batch 1's %.2f and compute-bound", big.Spec.Speedup, big.Spec.Bound, small.Spec.Speedup)
	}
	if be := small.Spec.BreakEvenAlpha; !(be > 0 && be < 0.8) {
		t.Errorf("break-even α %.3f", be)
	}
}

func TestBadInput(t *testing.T) {
	g := mustGPU(t, "H100-SXM")
	m := mustModel(t, "Llama-3.1-8B")
	e := mustNew(t, Config{Model: m, GPU: g})
	bad := []struct {
		w    Workload
		want string
	}{
		{Workload{Input: 0, Output: 10, Batch: 1}, "input length"},
		{Workload{Input: 10, Output: -1, Batch: 1}, "output length"},
		{Workload{Input: 10, Output: 10, Batch: 0}, "batch size"},
		{Workload{Input: 10, Output: 10, Batch: 1, SpecK: 0, SpecAlpha: 0.5}, "draft length"},
		{Workload{Input: 10, Output: 10, Batch: 1, SpecK: 4, SpecAlpha: 1}, "α"},
		{Workload{Input: 10, Output: 10, Batch: 1, SpecK: 4, SpecAlpha: -0.1}, "α"},
		{Workload{Input: 10, Output: 10, Batch: 1, SpecK: 4, SpecAlpha: math.NaN()}, "α"},
	}
	for _, b := range bad {
		if _, err := e.Estimate(b.w); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("Estimate(%+v) = %v, want error with %q", b.w, err, b.want)
		}
	}
	if _, err := ParseDType("fp4"); err == nil || !strings.Contains(err.Error(), "bf16, fp16, fp8, int8, int4") {
		t.Errorf("ParseDType: %v", err)
	}
	for _, cfg := range []Config{
		{Model: m, GPU: g, TP: 3},
		{Model: m, GPU: g, WeightDType: "fp4"},
		{Model: m, GPU: g, KVDType: INT4},
		{Model: m, GPU: g, MemUtil: 1.5},
		{Model: m, GPU: g, Eff: Efficiency{Compute: 2, Memory: 1, Interconnect: 1}},
		{Model: ModelSpec{Name: "x"}, GPU: g},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	if _, err := e.TTFT(0); err == nil {
		t.Error("TTFT(0) accepted")
	}
}

func TestEstimateFormulas(t *testing.T) {
	e := mustNew(t, Config{Model: mustModel(t, "Llama-3.1-8B"), GPU: mustGPU(t, "H100-SXM")})
	r, err := e.Estimate(Workload{Input: 1000, Output: 200, Batch: 4})
	if err != nil {
		t.Fatal(err)
	}
	if r.E2E != r.TTFT+199*r.TPOT {
		t.Errorf("E2E %v != TTFT + 199 × TPOT", r.E2E)
	}
	if got, want := r.KVBytesPerSeq, int64(1200*131072); got != want {
		t.Errorf("KV per seq %d, want %d", got, want)
	}
	if got, want := r.MaxConcurrentSeqs, e.KVCapacityTokens()/1200; got != want {
		t.Errorf("max seqs %d, want %d", got, want)
	}
	if math.Abs(r.UserTokPerSec-1/r.TPOT.Seconds()) > 1e-9 || math.Abs(r.TotalTokPerSec-4*200/r.E2E.Seconds()) > 1e-9 {
		t.Errorf("tok/s %+v", r)
	}
	s := r.Shares
	if r.Bound == "memory" && math.Abs(s.Memory+s.Comm+s.Overhead-1) > 1e-6 {
		t.Errorf("shares of a memory-bound step should sum to 1: %+v", s)
	}
	// KV capacity: (0.9 × 80 GiB − reserve − weights) / 128 KiB.
	c := e.Config()
	want := (int64(0.9*float64(80<<30)) - c.ReserveBytes - e.WeightBytes()) / 131072
	if d := e.KVCapacityTokens() - want; d < -1 || d > 1 {
		t.Errorf("capacity %d, want %d", e.KVCapacityTokens(), want)
	}
}

// A mixed batch costs what its parts imply: the step time of a batch is
// monotone in tokens and context, and StepTime ignores empty sequences.
func TestStepTimeMonotone(t *testing.T) {
	e := mustNew(t, Config{Model: mustModel(t, "Llama-3.1-8B"), GPU: mustGPU(t, "H100-SXM")})
	var b Batch
	b.Add(512, 0)
	base := e.StepTime(&b)
	b.Add(1, 4000)
	more := e.StepTime(&b)
	b.Add(0, 100) // nothing to compute
	same := e.StepTime(&b)
	if !(more > base) || same != more {
		t.Errorf("base %v, +decode %v, +empty %v", base, more, same)
	}
	b.Reset()
	if e.StepTime(&b) != 0 {
		t.Error("empty batch should cost 0")
	}
}

func mixedBatch(n int) *Batch {
	var b Batch
	for i := range n {
		if i%32 == 0 {
			b.Add(512, 1024*(i%4))
		} else {
			b.Add(1, 500+37*i)
		}
	}
	return &b
}

// Target: ≤ 2 µs and 0 allocations per call for a 256-sequence mixed batch.
func BenchmarkStepTime256(b *testing.B) {
	e := mustNew(b, Config{Model: mustModel(b, "Llama-3.1-70B"), GPU: mustGPU(b, "H100-SXM"), TP: 4})
	batch := mixedBatch(256)
	b.ReportAllocs()
	var sink time.Duration
	for b.Loop() {
		sink += e.StepTime(batch)
	}
	_ = sink
}

func BenchmarkStepTime256MoE(b *testing.B) {
	e := mustNew(b, Config{Model: mustModel(b, "Mixtral-8x7B"), GPU: mustGPU(b, "H100-SXM"), TP: 2})
	batch := mixedBatch(256)
	b.ReportAllocs()
	for b.Loop() {
		e.StepTime(batch)
	}
}

func TestStepTimeAllocs(t *testing.T) {
	e := mustNew(t, Config{Model: mustModel(t, "Mixtral-8x7B"), GPU: mustGPU(t, "H100-SXM"), TP: 2})
	batch := mixedBatch(256)
	if n := testing.AllocsPerRun(100, func() { e.StepTime(batch) }); n != 0 {
		t.Errorf("StepTime allocates %v times per call", n)
	}
}

// In a speculative step only decoding sequences are verifies: a prompt
// chunk as long as a verify (k+1 tokens) gets one logit row and no draft
// cost.
func TestBreakdownVerifyIsMarkedNotInferred(t *testing.T) {
	draft := mustModel(t, "Llama-3.1-8B")
	e := mustNew(t, Config{Model: mustModel(t, "Llama-3.1-70B"), GPU: mustGPU(t, "H100-SXM"), TP: 4, DraftModel: &draft})
	const k, ctx = 2, 700
	dec := Batch{DraftK: k}
	dec.AddDecode(k+1, ctx)
	chunk := Batch{DraftK: k}
	chunk.Add(k+1, ctx)
	d, c := e.Breakdown(&dec), e.Breakdown(&chunk)
	if want := e.verifyStep(1, ctx, k); d.Total != want.Total || d.Draft != want.Draft || d.Draft == 0 {
		t.Errorf("verify: total %v draft %v, want %v and %v", d.Total, d.Draft, want.Total, want.Draft)
	}
	if c.Draft != 0 || c.LinearFLOPs >= d.LinearFLOPs {
		t.Errorf("prompt chunk of %d tokens priced as a verify: draft %v, linear FLOPs %g (verify %g)", k+1, c.Draft, c.LinearFLOPs, d.LinearFLOPs)
	}
}

// SeqOverhead is paid once per sequence that computes in a step, whatever
// its tokens: 64 decodes at 40 µs add 64 × 40 µs = 2.56 ms to the same step
// without it; a sequence with nothing to compute adds nothing.
func TestSeqOverheadPerSequence(t *testing.T) {
	g := mustGPU(t, "H100-SXM")
	eff := DefaultEfficiency(g)
	eff.SeqOverhead = 0
	base := mustNew(t, Config{Model: mustModel(t, "Llama-3.1-8B"), GPU: g, Eff: eff})
	eff.SeqOverhead = 40 * time.Microsecond
	with := mustNew(t, Config{Model: mustModel(t, "Llama-3.1-8B"), GPU: g, Eff: eff})
	var b Batch
	for i := range 64 {
		b.Add(1, 1000+i)
	}
	b.Add(0, 500)
	d := with.StepTime(&b) - base.StepTime(&b)
	if d != 2560*time.Microsecond {
		t.Errorf("64 sequences × 40 µs added %v, want 2.56ms", d)
	}
	if s := with.Breakdown(&b); s.Overhead != 1500*time.Microsecond+32*25*time.Microsecond+2560*time.Microsecond {
		t.Errorf("overhead %v, want 1.5 ms + 32 × 25 µs + 64 × 40 µs", s.Overhead)
	}
}

// The context overhead adds its cost per context token of every sequence
// in the step, whatever the TP: two decodes at contexts 1,000 and 3,000
// with 2.5 ns per token pay 4,000 × 2.5 ns = 10 µs more.
func TestContextOverheadHandComputed(t *testing.T) {
	for _, tp := range []int{1, 4} {
		cfg := Config{Model: mustModel(t, "Llama-3.1-8B"), GPU: mustGPU(t, "H100-SXM"), TP: tp, Eff: DefaultEfficiency(mustGPU(t, "H100-SXM"))}
		base := mustNew(t, cfg)
		cfg.Eff.ContextOverheadNS = 2.5
		with := mustNew(t, cfg)
		var b Batch
		b.AddDecode(1, 1000)
		b.AddDecode(1, 3000)
		if got, want := with.StepTime(&b)-base.StepTime(&b), 10*time.Microsecond; got != want {
			t.Errorf("TP %d: context overhead adds %v, want %v", tp, got, want)
		}
	}
	cfg := Config{Eff: Efficiency{Compute: 1, Memory: 1, Interconnect: 1, ContextOverheadNS: -1}}
	if err := cfg.Eff.Validate(); err == nil {
		t.Error("a negative context overhead validated")
	}
}

// A physical batch of 512 tokens runs a step of 1,200 prompt tokens as
// ⌈1,200 ÷ 512⌉ = 3 forward passes: Llama-3.1-8B's weights read per step
// (bf16, input embedding excluded: 2 × (8,030,261,248 − 525,336,576) B =
// 15,009,849,344 B) three times, and the layer overhead 3 × 32 × 25 µs; a
// step of 512 tokens is one pass, as without a bound. FLOPs do not change.
func TestUBatchPassesHandComputed(t *testing.T) {
	g := mustGPU(t, "H100-SXM")
	cfg := Config{Model: mustModel(t, "Llama-3.1-8B"), GPU: g}
	whole := mustNew(t, cfg)
	cfg.UBatch = 512
	split := mustNew(t, cfg)
	var b Batch
	b.Add(1200, 0)
	w, s := whole.Breakdown(&b), split.Breakdown(&b)
	const weights = 2 * (8_030_261_248 - 128_256*4096)
	if w.WeightBytes != weights || w.Passes != 0 {
		t.Fatalf("one pass: weight bytes %.0f, passes %d; want %d, 0", w.WeightBytes, w.Passes, weights)
	}
	if s.Passes != 3 || s.WeightBytes != 3*weights {
		t.Errorf("UBatch 512, 1,200 tokens: passes %d, weight bytes %.0f; want 3, %d", s.Passes, s.WeightBytes, 3*weights)
	}
	if s.FLOPs != w.FLOPs {
		t.Errorf("FLOPs %g with passes, %g without", s.FLOPs, w.FLOPs)
	}
	if got, want := s.Overhead-w.Overhead, 2*32*25*time.Microsecond; got != want {
		t.Errorf("two more passes add %v of overhead, want %v", got, want)
	}
	b.Reset()
	b.Add(512, 0)
	if a, c := whole.Breakdown(&b), split.Breakdown(&b); a.Total != c.Total || c.Passes != 1 {
		t.Errorf("512 tokens: %v in %d pass(es) with UBatch 512, %v without", c.Total, c.Passes, a.Total)
	}
	if _, err := New(Config{Model: cfg.Model, GPU: g, UBatch: -1}); err == nil || !strings.Contains(err.Error(), "ubatch") {
		t.Errorf("UBatch −1: %v", err)
	}
}

// The ring step is paid 2(TP−1) times per all-reduce, two all-reduces per
// layer: Llama-3.1-8B (32 layers) at TP 8 with a 3 µs step instead of
// NVLink's 0.5 µs pays 64 × 14 × 2.5 µs = 2.24 ms more per step, at TP 2
// 64 × 2 × 2.5 µs = 0.32 ms; 0 keeps the link's figure, and TP 1 pays
// nothing.
func TestRingStepHandComputed(t *testing.T) {
	g := mustGPU(t, "H100-SXM")
	for _, c := range []struct {
		tp   int
		want time.Duration
	}{{1, 0}, {2, 320 * time.Microsecond}, {8, 2240 * time.Microsecond}} {
		cfg := Config{Model: mustModel(t, "Llama-3.1-8B"), GPU: g, TP: c.tp, Eff: DefaultEfficiency(g)}
		base := mustNew(t, cfg)
		cfg.Eff.RingStep = RingStepLatency(g)
		same := mustNew(t, cfg)
		cfg.Eff.RingStep = 3 * time.Microsecond
		with := mustNew(t, cfg)
		var b Batch
		b.AddDecode(1, 1000)
		b.Add(300, 0)
		if d := same.StepTime(&b) - base.StepTime(&b); d != 0 {
			t.Errorf("TP %d: a ring step equal to the link's figure moved the step by %v", c.tp, d)
		}
		if got := with.Breakdown(&b).Comm - base.Breakdown(&b).Comm; got != c.want {
			t.Errorf("TP %d: a 3 µs ring step adds %v to the all-reduces, want %v", c.tp, got, c.want)
		}
	}
	if err := (Efficiency{Compute: 1, Memory: 1, Interconnect: 1, RingStep: -1}).Validate(); err == nil {
		t.Error("a negative ring step validated")
	}
}

// An engine that captures only decode steps in CUDA graphs runs every
// step with a prompt token eagerly: DeepSeek-R1's 61 layers at 976 µs a
// layer add 61 × 976 µs = 59.536 ms to a step of one 922-token prefill
// and to a step of that prefill beside two decodes, nothing to a step of
// decodes alone; with UBatch 512 the prefill's two passes pay it twice.
func TestEagerLayerHandComputed(t *testing.T) {
	g := mustGPU(t, "H200")
	cfg := Config{Model: mustModel(t, "DeepSeek-R1"), GPU: g, TP: 8, WeightDType: FP8}
	graphed := mustNew(t, cfg)
	cfg.EagerLayer = 976 * time.Microsecond
	eager := mustNew(t, cfg)
	const want = 61 * 976 * time.Microsecond
	var b Batch
	b.Add(922, 0)
	got := eager.Breakdown(&b)
	if d := got.Overhead - graphed.Breakdown(&b).Overhead; d != want || !got.Eager {
		t.Errorf("one prefill: eager adds %v (eager %v), want %v", d, got.Eager, want)
	}
	b.AddDecode(1, 1000)
	b.AddDecode(1, 2000)
	if d := eager.StepTime(&b) - graphed.StepTime(&b); d != want {
		t.Errorf("a prefill beside two decodes: eager adds %v, want %v", d, want)
	}
	b.Reset()
	b.AddDecode(1, 1000)
	b.AddDecode(1, 2000)
	if d := eager.Breakdown(&b); d.Total != graphed.StepTime(&b) || d.Eager {
		t.Errorf("decodes alone: %v eager (%v), %v graphed", d.Total, d.Eager, graphed.StepTime(&b))
	}
	cfg.UBatch = 512
	split := mustNew(t, cfg)
	cfg.EagerLayer = 0
	splitGraphed := mustNew(t, cfg)
	b.Reset()
	b.Add(922, 0)
	if d := split.StepTime(&b) - splitGraphed.StepTime(&b); d != 2*want {
		t.Errorf("two passes: eager adds %v, want %v", d, 2*want)
	}
	if _, err := New(Config{Model: cfg.Model, GPU: g, TP: 8, EagerLayer: -1}); err == nil || !strings.Contains(err.Error(), "eager") {
		t.Errorf("EagerLayer −1: %v", err)
	}
}

// With graphs of prompt steps up to EagerAbove tokens (SGLang's piecewise
// graphs, 2,048 for MLA), only a longer pass runs eagerly: a 2,048-token
// prefill adds nothing, a 2,049-token one and one of 7,373 add 61 × 976 µs
// = 59.536 ms, as two 1,100-token prefills in one 2,200-token step do.
func TestEagerAboveHandComputed(t *testing.T) {
	cfg := Config{Model: mustModel(t, "DeepSeek-R1"), GPU: mustGPU(t, "B200"), TP: 8, WeightDType: FP8}
	graphed := mustNew(t, cfg)
	cfg.EagerLayer, cfg.EagerAbove = 976*time.Microsecond, 2048
	capped := mustNew(t, cfg)
	const want = 61 * 976 * time.Microsecond
	for _, c := range []struct {
		prompts []int
		add     time.Duration
	}{{[]int{2048}, 0}, {[]int{2049}, want}, {[]int{7373}, want}, {[]int{1100, 1100}, want}, {[]int{922}, 0}} {
		var b Batch
		for _, n := range c.prompts {
			b.Add(n, 0)
		}
		if d := capped.StepTime(&b) - graphed.StepTime(&b); d != c.add || capped.Breakdown(&b).Eager != (c.add > 0) {
			t.Errorf("prompts %v: eager adds %v, want %v", c.prompts, d, c.add)
		}
	}
	if _, err := New(Config{Model: cfg.Model, GPU: cfg.GPU, TP: 8, EagerAbove: -1}); err == nil || !strings.Contains(err.Error(), "eager above") {
		t.Errorf("EagerAbove −1: %v", err)
	}
}
