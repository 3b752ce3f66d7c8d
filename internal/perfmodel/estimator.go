package perfmodel

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Config chooses what the Estimator models.
type Config struct {
	Model ModelSpec
	GPU   GPU
	// TP is the tensor-parallel degree (GPUs per replica); 0 means 1.
	TP int
	// WeightDType is the weights' precision (bf16 when empty). Embeddings,
	// the output head and norms stay 16-bit whatever it is, as quantized
	// checkpoints keep them.
	WeightDType DType
	// KVDType is the KV cache's precision (bf16 when empty).
	KVDType DType
	// MemUtil is the fraction of each GPU's memory the engine may use
	// (vLLM's gpu_memory_utilization); 0 means 0.9.
	MemUtil float64
	// KVFreeFraction, when above 0, sizes the KV cache as TensorRT-LLM
	// does (kv_cache_free_gpu_memory_fraction): this fraction of the memory
	// the weights and the reserve leave, in place of MemUtil's share of
	// the whole card.
	KVFreeFraction float64
	// Eff holds the efficiency factors; the zero value means
	// DefaultEfficiency(GPU).
	Eff Efficiency
	// ReserveBytes is per-GPU memory kept for activations, CUDA graphs and
	// the runtime; 0 means DefaultReserve.
	ReserveBytes int64
	// DraftModel, when set, is the speculative-decoding draft model, run
	// with the same GPUs, TP and precisions; its weights and KV share memory.
	DraftModel *ModelSpec
	// UBatch is the most tokens one forward pass takes (llama.cpp's
	// physical batch, n_ubatch): a step of more tokens runs as
	// ⌈tokens ÷ UBatch⌉ passes, each reading the weights and paying the
	// layer overheads again. 0: a step is one pass, however many tokens
	// (the GPU engines).
	UBatch int
	// EagerLayer is the host cost per layer of a forward pass the engine
	// runs eagerly, kernel by kernel, instead of replaying a captured CUDA
	// graph: paid once per pass by every step that computes a prompt
	// token, where the engine captures graphs of decode steps only
	// (SGLang before piecewise graphs, docs/perfmodel.md "Eager
	// prefill"). 0: every step replays a graph (its launches are in
	// LayerOverhead).
	EagerLayer time.Duration
	// EagerAbove is the most tokens a pass with prompt tokens may take and
	// still replay a captured graph (SGLang's piecewise prefill graphs, up
	// to --piecewise-cuda-graph-max-tokens): only a longer pass pays
	// EagerLayer. 0: every pass with a prompt token runs eagerly.
	EagerAbove int
}

// DefaultMemUtil is the default fraction of GPU memory the engine uses.
const DefaultMemUtil = 0.9

// DefaultReserve is the per-GPU reserve for activations and the runtime: 1 GiB
// plus the activations of an 8,192-token step (4 × hidden + 2 × intermediate
// per rank, 2 bytes each), the way vLLM profiles a maximal batch.
func DefaultReserve(m ModelSpec, tp int) int64 {
	width := 4*m.Hidden + 2*max(m.Intermediate, m.MoEIntermediate*max(1, m.ExpertsPerToken))/max(tp, 1)
	return 1<<30 + int64(8192)*int64(width)*2
}

// NoFitError says the weights do not fit at the configured TP, with the
// numbers and the smallest TP that fits (0 when none up to 64 does).
type NoFitError struct {
	Model, GPU  string
	TP          int
	WeightBytes int64 // per GPU
	UsableBytes int64 // per GPU: memory × mem util − reserve
	MinTP       int
}

func (e *NoFitError) Error() string {
	s := fmt.Sprintf("%s does not fit on %d × %s: weights %.1f GiB > usable %.1f GiB per GPU",
		e.Model, e.TP, e.GPU, float64(e.WeightBytes)/(1<<30), float64(e.UsableBytes)/(1<<30))
	if e.MinTP > 0 {
		return s + fmt.Sprintf("; smallest TP that fits: %d (--tp %d)", e.MinTP, e.MinTP)
	}
	return s + "; no TP up to 64 fits"
}

// Estimator predicts step times for one configuration. It is immutable after
// New and safe for concurrent use.
type Estimator struct {
	cfg      Config
	tp       int
	wdt, kdt DType
	eff      Efficiency

	params     Params
	weightByte int64 // all GPUs

	// Per-GPU constants of the step-time formula.
	linFLOPsPerToken float64 // 2 × active params (without the output head) / TP
	headFLOPsPerRow  float64 // 2 × vocab × hidden / TP
	attnPerPair      float64 // attention FLOPs per (query, cached token) pair, all layers / TP
	denseReadBytes   float64 // weights read every step, per GPU (no routed experts)
	expertBytes      float64 // one routed expert of one layer, per GPU
	moeLayers        float64
	experts, topK    float64
	kvTokenRank      float64 // KV bytes per token per GPU
	linPeak          float64 // FLOP/s for the linear layers, after efficiency
	attnPeak         float64 // FLOP/s for attention, after efficiency
	bw               float64 // B/s after efficiency
	cacheBytes       float64 // the device's last-level cache (0: none)
	cacheBW          float64 // its read bandwidth in B/s after efficiency
	arBytesPerToken  float64 // bytes of one all-reduce per token (hidden × 2)
	arFactor         float64 // seconds per byte of an all-reduce: 2(TP−1)/TP / (link × eff)
	arLatency        float64 // seconds
	allReduces       float64 // per step: 2 per layer
	overhead         float64 // seconds per step: the step overhead
	passOverhead     float64 // seconds per forward pass: layers × layer overhead
	eagerOverhead    float64 // seconds per forward pass with a prompt token: layers × EagerLayer
	eagerAbove       float64 // tokens a pass may take and replay a graph (Config.EagerAbove)
	ubatch           float64 // tokens per forward pass (0: no bound)
	seqOverhead      float64 // seconds per sequence in a step
	ctxOverhead      float64 // seconds per context token in a step

	usable     int64 // per GPU bytes for weights + KV
	kvCapacity int64 // tokens

	draft *Estimator
}

// New checks cfg and precomputes the step-time constants. Weights that do not
// fit give a *NoFitError.
func New(cfg Config) (*Estimator, error) { return newEstimator(cfg, true) }

func newEstimator(cfg Config, findMinTP bool) (*Estimator, error) {
	e := &Estimator{cfg: cfg}
	if err := e.settle(cfg); err != nil {
		return nil, err
	}
	if err := e.stepConstants(); err != nil {
		return nil, err
	}
	if err := e.fit(cfg, findMinTP); err != nil {
		return nil, err
	}
	return e, nil
}

// settle checks cfg and fills e's configuration: the model normalised,
// TP, precisions, memory utilisation, efficiency and reserve defaulted.
func (e *Estimator) settle(cfg Config) error {
	m := cfg.Model
	m.normalize()
	if err := m.Validate(); err != nil {
		return err
	}
	e.cfg.Model = m
	g := cfg.GPU
	if g.Name == "" || !(g.HBMBandwidth > 0) || g.MemoryBytes <= 0 || !(g.PeakFLOPS[BF16] > 0) {
		return errors.New("GPU: name, memory, bandwidth and bf16 peak are required")
	}
	e.tp = cfg.TP
	if e.tp == 0 {
		e.tp = 1
	}
	if e.tp < 0 || e.tp > 1024 {
		return fmt.Errorf("tp must be ≥ 1 (got %d)", cfg.TP)
	}
	if m.Heads%e.tp != 0 {
		return fmt.Errorf("tp %d must divide the %d attention heads of %s", e.tp, m.Heads, m.Name)
	}
	if m.Attention != AttnMLA && e.tp < m.KVHeads && m.KVHeads%e.tp != 0 {
		return fmt.Errorf("tp %d must divide the %d KV heads of %s", e.tp, m.KVHeads, m.Name)
	}
	if m.Attention != AttnMLA && e.tp > m.KVHeads && e.tp%m.KVHeads != 0 {
		return fmt.Errorf("tp %d must be a multiple of the %d KV heads of %s", e.tp, m.KVHeads, m.Name)
	}
	e.wdt, e.kdt = cfg.WeightDType, cfg.KVDType
	if e.wdt == "" {
		e.wdt = BF16
	}
	if e.kdt == "" {
		e.kdt = BF16
	}
	if !e.wdt.Valid() {
		return fmt.Errorf("unknown weight dtype %q (known: bf16, fp16, fp8, int8, int4, mxfp4, nvfp4)", e.wdt)
	}
	if !e.kdt.validKV() {
		return fmt.Errorf("KV cache dtype %q is not supported (bf16, fp16, fp8, int8)", e.kdt)
	}
	if cfg.MemUtil == 0 {
		e.cfg.MemUtil = DefaultMemUtil
	}
	if !(e.cfg.KVFreeFraction >= 0 && e.cfg.KVFreeFraction <= 1) {
		return fmt.Errorf("kv free fraction must be in [0, 1] (got %g)", cfg.KVFreeFraction)
	}
	if !(e.cfg.MemUtil > 0 && e.cfg.MemUtil <= 1) {
		return fmt.Errorf("mem util must be in (0, 1] (got %g)", cfg.MemUtil)
	}
	e.eff = cfg.Eff
	if e.eff == (Efficiency{}) {
		e.eff = DefaultEfficiency(g)
	}
	if err := e.eff.Validate(); err != nil {
		return err
	}
	e.cfg.Eff = e.eff
	e.cfg.TP, e.cfg.WeightDType, e.cfg.KVDType = e.tp, e.wdt, e.kdt
	if cfg.UBatch < 0 {
		return fmt.Errorf("ubatch must be ≥ 0 (got %d)", cfg.UBatch)
	}
	if cfg.EagerAbove < 0 {
		return fmt.Errorf("eager above must be ≥ 0 tokens (got %d)", cfg.EagerAbove)
	}
	if cfg.EagerLayer < 0 {
		return fmt.Errorf("eager layer overhead must be ≥ 0 (got %v)", cfg.EagerLayer)
	}
	if cfg.ReserveBytes < 0 {
		return fmt.Errorf("reserve must be ≥ 0 (got %d)", cfg.ReserveBytes)
	}
	if cfg.ReserveBytes == 0 {
		e.cfg.ReserveBytes = DefaultReserve(m, e.tp)
	}

	return nil
}

// stepConstants precomputes what a step's time is made of: FLOPs and bytes
// per token and per weight read, the effective peaks, the all-reduce's
// cost and the overheads.
func (e *Estimator) stepConstants() error {
	m, g := e.cfg.Model, e.cfg.GPU
	tp := float64(e.tp)
	p := m.ParamCounts()
	e.params = p
	wb := e.wdt.Bytes()
	const b16 = 2.0
	// Linear (quantizable) weights vs 16-bit ones.
	linear := p.Attention + p.DenseMLP + p.RoutedExperts + p.SharedMoE
	e.weightByte = int64(float64(linear)*wb + float64(p.Embedding+p.LMHead+p.Norms)*b16)

	head := p.LMHead
	if m.TiedEmbeddings {
		head = p.Embedding
	}
	active := m.ActiveParams()
	e.linFLOPsPerToken = 2 * float64(active-head) / tp
	e.headFLOPsPerRow = 2 * float64(m.Vocab) * float64(m.Hidden) / tp
	e.attnPerPair = float64(m.Layers) * m.attnFLOPsPerPair() / tp
	e.denseReadBytes = (float64(p.Attention+p.DenseMLP+p.SharedMoE)*wb + float64(head+p.Norms)*b16) / tp
	if m.Experts > 0 {
		e.expertBytes = float64(p.Expert) * wb / tp
		e.moeLayers = float64(m.Layers - m.DenseLayers)
		e.experts, e.topK = float64(m.Experts), float64(m.ExpertsPerToken)
	}
	e.kvTokenRank = float64(e.KVBytesPerToken()) / tp

	cd := g.ComputeDType(e.wdt)
	e.linPeak = g.PeakFLOPS[cd] * e.eff.Compute
	attnDT := BF16
	if g.PeakFLOPS[FP16] > 0 {
		attnDT = FP16
	}
	e.attnPeak = g.PeakFLOPS[attnDT] * e.eff.Compute
	e.bw = g.HBMBandwidth * e.eff.Memory
	if g.CacheBytes > 0 && g.CacheBandwidth > 0 {
		e.cacheBytes, e.cacheBW = float64(g.CacheBytes), g.CacheBandwidth*e.eff.Memory
	}
	if e.tp > 1 {
		if !(g.InterconnectBW > 0) {
			return fmt.Errorf("GPU %s has no interconnect bandwidth for tp %d", g.Name, e.tp)
		}
		e.arBytesPerToken = float64(m.Hidden) * b16
		e.arFactor = 2 * (tp - 1) / tp / (g.InterconnectBW * e.eff.Interconnect)
		e.arLatency = e.eff.AllReduceLatency.Seconds() + 2*(tp-1)*ringStep(e.eff, g).Seconds()
		e.allReduces = 2 * float64(m.Layers)
	}
	e.overhead = e.eff.StepOverhead.Seconds()
	e.passOverhead = float64(m.Layers) * e.eff.LayerOverhead.Seconds()
	e.eagerOverhead = float64(m.Layers) * e.cfg.EagerLayer.Seconds()
	e.eagerAbove = float64(e.cfg.EagerAbove)
	e.ubatch = float64(e.cfg.UBatch)
	e.seqOverhead = e.eff.SeqOverhead.Seconds()
	e.ctxOverhead = e.eff.ContextOverheadNS * 1e-9

	return nil
}

// fit checks that the weights (and a draft model's) fit in the usable
// memory and sizes the KV cache from the rest.
func (e *Estimator) fit(cfg Config, findMinTP bool) error {
	m, g := e.cfg.Model, e.cfg.GPU
	// Memory: weights (and a draft model's) must fit, the rest is KV cache.
	e.usable = int64(e.cfg.MemUtil*float64(g.MemoryBytes)) - e.cfg.ReserveBytes
	if e.cfg.KVFreeFraction > 0 {
		e.usable = g.MemoryBytes - e.cfg.ReserveBytes
	}
	perGPU := e.WeightBytes() / int64(e.tp)
	kvPerTokenGPU := e.kvTokenRank
	if cfg.DraftModel != nil {
		dc := e.cfg
		dc.DraftModel = nil
		d, err := New(dc.withModel(*cfg.DraftModel))
		if err != nil {
			var nf *NoFitError
			if !errors.As(err, &nf) {
				return fmt.Errorf("draft model: %w", err)
			}
		}
		if d == nil {
			d, err = newUnchecked(dc.withModel(*cfg.DraftModel))
			if err != nil {
				return fmt.Errorf("draft model: %w", err)
			}
		}
		e.draft = d
		perGPU += d.WeightBytes() / int64(e.tp)
		kvPerTokenGPU += d.kvTokenRank
	}
	if perGPU >= e.usable {
		nf := &NoFitError{Model: m.Name, GPU: g.Name, TP: e.tp, WeightBytes: perGPU, UsableBytes: e.usable}
		if findMinTP {
			nf.MinTP = minTP(cfg)
		}
		return nf
	}
	free := float64(e.usable - perGPU)
	if f := e.cfg.KVFreeFraction; f > 0 {
		free *= f
	}
	e.kvCapacity = int64(free / kvPerTokenGPU)
	return nil
}

func (c Config) withModel(m ModelSpec) Config { c.Model = m; return c }

// newUnchecked builds an estimator without the memory check (for a draft
// model whose fit is judged together with its target).
func newUnchecked(cfg Config) (*Estimator, error) {
	cfg.GPU.MemoryBytes = math.MaxInt64 / 4
	return New(cfg)
}

// minTP is the smallest power-of-two TP up to 64 at which cfg's weights fit.
func minTP(cfg Config) int {
	for tp := 1; tp <= 64; tp *= 2 {
		if tp <= max(cfg.TP, 1) {
			continue
		}
		c := cfg
		c.TP = tp
		if _, err := newEstimator(c, false); err == nil {
			return tp
		}
	}
	return 0
}

// LargestTP is the largest power-of-two tensor-parallel degree, up to
// 64, that m's attention heads allow (40 heads: 8; 96: 32): where MinTP
// finds none that fits, the one whose no-fit error to report.
func LargestTP(m ModelSpec) int {
	for tp := 64; tp > 1; tp /= 2 {
		if m.Heads%tp != 0 {
			continue
		}
		if m.Attention != AttnMLA && (tp < m.KVHeads && m.KVHeads%tp != 0 || tp > m.KVHeads && tp%m.KVHeads != 0) {
			continue
		}
		return tp
	}
	return 1
}

// MinTP is the smallest power-of-two tensor-parallel degree (up to 64) at
// which cfg's weights fit, trying from 1; 0 when none does.
func MinTP(cfg Config) int {
	cfg.TP = 1
	if _, err := newEstimator(cfg, false); err == nil {
		return 1
	}
	return minTP(cfg)
}

// Config returns the configuration with every default filled in.
func (e *Estimator) Config() Config { return e.cfg }

// Params is the model's parameter counts.
func (e *Estimator) Params() Params { return e.params }

// WeightBytes is the whole model's weight storage over all TP ranks.
func (e *Estimator) WeightBytes() int64 { return e.weightByte }

// KVBytesPerToken is the KV cache one token occupies, summed over all TP
// ranks: 2 (K and V) × layers × KV heads × head dim × bytes, where each rank
// holds at least one KV head (heads are replicated when TP > KV heads); for
// MLA, layers × (kv_lora_rank + rope dim) × bytes on every rank.
func (e *Estimator) KVBytesPerToken() int64 {
	m := e.cfg.Model
	var perRank float64
	if m.Attention == AttnMLA {
		perRank = float64(m.kvElemsPerTokenLayer())
	} else {
		headsPerRank := max(1, m.KVHeads/e.tp)
		perRank = 2 * float64(headsPerRank*m.HeadDim)
	}
	return int64(math.Round(perRank * float64(m.Layers) * e.kdt.Bytes() * float64(e.tp)))
}

// UsableBytesPerGPU is memory × mem util − reserve.
func (e *Estimator) UsableBytesPerGPU() int64 { return e.usable }

// KVCapacityTokens is how many tokens of KV cache fit after weights, the
// memory-utilization fraction and the reserve.
func (e *Estimator) KVCapacityTokens() int64 { return e.kvCapacity }

// Step is the breakdown of one step's time. FLOPs and bytes are per GPU.
type Step struct {
	Seqs, Tokens   int
	LinearFLOPs    float64 `json:"linear_flops"`
	AttentionFLOPs float64 `json:"attention_flops"`
	FLOPs          float64 `json:"flops"`
	WeightBytes    float64 `json:"weight_bytes"`
	KVReadBytes    float64 `json:"kv_read_bytes"`
	KVWriteBytes   float64 `json:"kv_write_bytes"`
	Bytes          float64 `json:"bytes"`
	// ExpertsTouched is the expected routed experts read per MoE layer
	// and forward pass.
	ExpertsTouched float64 `json:"experts_touched,omitempty"`
	// Passes is the forward passes the step runs as when a pass takes at
	// most Config.UBatch tokens (absent when it has no bound: one pass).
	Passes int `json:"passes,omitempty"`
	// Cached says the step's bytes of one forward pass fit in the
	// device's last-level cache (GPU.CacheBytes) and were read at its
	// bandwidth: they stay there from one step to the next.
	Cached bool `json:"cached,omitempty"`
	// Eager says the step computes a prompt token and its passes ran
	// eagerly (Config.EagerLayer), their host cost in Overhead.
	Eager     bool    `json:"eager,omitempty"`
	CommBytes float64 `json:"comm_bytes"`
	Compute   time.Duration
	Memory    time.Duration
	Comm      time.Duration
	Overhead  time.Duration
	// Draft is the draft model's time for a speculative step.
	Draft time.Duration
	Total time.Duration
	// Bound is "compute" or "memory", whichever of the two is longer.
	Bound string
}

// Intensity is the step's arithmetic intensity in FLOPs per byte.
func (s Step) Intensity() float64 {
	if s.Bytes == 0 {
		return 0
	}
	return s.FLOPs / s.Bytes
}

// agg is what the step-time formula needs from a batch.
type agg struct {
	seqs, tokens, rows float64
	prefills           float64 // sequences computing prompt tokens
	ctx                float64 // Σ context
	pairs              float64 // Σ n × (c + (n+1)/2): causal attention pairs
}

// StepTime is the predicted duration of one engine step. It does not retain
// b and does not allocate.
func (e *Estimator) StepTime(b *Batch) time.Duration { return e.Breakdown(b).Total }

// Breakdown is StepTime with every term.
func (e *Estimator) Breakdown(b *Batch) Step {
	var a agg
	var nDec, decCtx float64
	for i := range b.Seqs {
		s := &b.Seqs[i]
		if s.NewTokens <= 0 {
			continue
		}
		n, c := float64(s.NewTokens), float64(max(s.Context, 0))
		a.seqs++
		a.tokens += n
		a.ctx += c
		a.pairs += n * (c + (n+1)/2)
		if !s.Decode {
			a.prefills++
		}
		if b.DraftK > 0 && s.Decode {
			a.rows += n
			nDec++
			decCtx += c
		} else {
			a.rows++
		}
	}
	st := e.step(a)
	if e.draft != nil && nDec > 0 {
		var d time.Duration
		for j := 0; j < b.DraftK; j++ {
			ctx := decCtx + float64(j)*nDec
			d += e.draft.step(agg{seqs: nDec, tokens: nDec, rows: nDec, ctx: ctx, pairs: ctx + nDec}).Total
		}
		st.Draft = d
		st.Total += d
	}
	return st
}

func (e *Estimator) step(a agg) Step {
	var s Step
	s.Seqs, s.Tokens = int(a.seqs), int(a.tokens)
	if a.tokens == 0 {
		return s
	}
	s.LinearFLOPs = e.linFLOPsPerToken*a.tokens + e.headFLOPsPerRow*a.rows
	s.AttentionFLOPs = e.attnPerPair * a.pairs
	s.FLOPs = s.LinearFLOPs + s.AttentionFLOPs
	// Every forward pass reads the weights: one pass per step, or one per
	// UBatch tokens of it.
	passes := 1.0
	if e.ubatch > 0 {
		passes = math.Ceil(a.tokens / e.ubatch)
		s.Passes = int(passes)
	}
	s.WeightBytes = e.denseReadBytes * passes
	if e.experts > 0 {
		// Expected distinct experts a pass of T tokens routes to, each token
		// picking k of E uniformly: E × (1 − (1 − k/E)^T).
		s.ExpertsTouched = e.experts * (1 - math.Pow(1-e.topK/e.experts, a.tokens/passes))
		s.WeightBytes += passes * s.ExpertsTouched * e.expertBytes * e.moeLayers
	}
	s.KVReadBytes = a.ctx * e.kvTokenRank
	s.KVWriteBytes = a.tokens * e.kvTokenRank
	s.Bytes = s.WeightBytes + s.KVReadBytes + s.KVWriteBytes
	compute := s.LinearFLOPs/e.linPeak + s.AttentionFLOPs/e.attnPeak
	bw := e.bw
	// A device with a last-level cache (a CPU's L3) keeps a small model's
	// weights and KV cache there between steps when one pass's bytes fit:
	// a pass over a working set larger than the cache evicts what it
	// reads before the next pass needs it, so it reads all from memory.
	if e.cacheBW > 0 && s.Bytes/passes <= e.cacheBytes {
		bw, s.Cached = e.cacheBW, true
	}
	memory := s.Bytes / bw
	var comm float64
	if e.allReduces > 0 {
		s.CommBytes = e.allReduces * a.tokens * e.arBytesPerToken
		comm = e.allReduces*e.arLatency + s.CommBytes*e.arFactor
	}
	s.Compute, s.Memory = seconds(compute), seconds(memory)
	overhead := e.overhead + passes*e.passOverhead + a.seqs*e.seqOverhead + a.ctx*e.ctxOverhead
	if a.prefills > 0 && e.eagerOverhead > 0 && (e.eagerAbove == 0 || a.tokens/passes > e.eagerAbove) {
		overhead += passes * e.eagerOverhead
		s.Eager = true
	}
	s.Comm, s.Overhead = seconds(comm), seconds(overhead)
	s.Bound = "memory"
	if compute > memory {
		s.Bound = "compute"
	}
	s.Total = seconds(max(compute, memory) + comm + overhead)
	return s
}

// RingStepLatency is the latency of one step of a ring all-reduce over g's
// link, which a collective of TP ranks takes 2(TP−1) of: NCCL's own tuning
// model (src/graph/tuning.cc, hwLat, ring with the low-latency protocol)
// puts it at 0.47 µs over NVLink and 1.0 µs over PCIe, the figures used
// here (0.5 µs for any NVLink or Infinity Fabric, 1 µs for PCIe).
func RingStepLatency(g GPU) time.Duration {
	if strings.HasPrefix(g.Interconnect, "pcie") {
		return time.Microsecond
	}
	return 500 * time.Nanosecond
}

// ringStep is eff's ring step, or g's link's figure when eff holds none.
func ringStep(eff Efficiency, g GPU) time.Duration {
	if eff.RingStep > 0 {
		return eff.RingStep
	}
	return RingStepLatency(g)
}

func seconds(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }
