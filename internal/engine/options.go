package engine

import (
	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// Options describe an engine as a user gives it: catalog names and vLLM's
// settings. Config resolves the model and GPU with the performance model,
// sizes the KV cache and returns a runnable Config, or a *field.Error
// naming the setting that is wrong. The field names (snake_case, as in
// the comments) are vLLM's where vLLM has the setting.
type Options struct {
	// Engine (engine) is the serving engine's family (LookupFamily:
	// vllm, sglang, trtllm, llamacpp, ollama): WithEngine applies its scheduler
	// defaults, and Config times the steps with its constants for the GPU
	// (unless a Profile gives others). Empty: vLLM's settings, the GPU
	// family's constants.
	Engine  string `json:"engine"`
	Model   string `json:"model"`    // model: catalog name or a Hugging Face config.json (file or folder)
	GPU     string `json:"gpu"`      // gpu: catalog name
	GPUFile string `json:"gpu_file"` // gpu_file: YAML catalog that adds to or overrides the built-in one
	// TensorParallelSize is the number of GPUs per replica
	// (tensor_parallel_size); 0 picks the smallest power of two at which
	// the weights fit.
	TensorParallelSize   int     `json:"tensor_parallel_size"`
	DType                string  `json:"dtype"`                   // dtype: weight precision; "auto" (or empty): bf16
	KVCacheDType         string  `json:"kv_cache_dtype"`          // kv_cache_dtype: "auto" (or empty): perfmodel.KVDTypeFor
	GPUMemoryUtilization float64 `json:"gpu_memory_utilization"`  // gpu_memory_utilization, in (0, 1]
	MaxNumSeqs           int     `json:"max_num_seqs"`            // max_num_seqs; 0: vLLM's default for the GPU
	MaxNumBatchedTokens  int     `json:"max_num_batched_tokens"`  // max_num_batched_tokens; 0: vLLM's default for the GPU
	BlockSize            int     `json:"block_size"`              // block_size, tokens per KV block
	NumGPUBlocksOverride int     `json:"num_gpu_blocks_override"` // num_gpu_blocks_override; 0: what fits in memory
	MaxModelLen          int     `json:"max_model_len"`           // max_model_len; 0: DefaultModelLen
	MaxWaiting           int     `json:"max_waiting"`             // max_waiting: waiting-queue bound; 0: unbounded
	EnablePrefixCaching  bool    `json:"enable_prefix_caching"`   // enable_prefix_caching
	EnableChunkedPrefill bool    `json:"enable_chunked_prefill"`  // enable_chunked_prefill
	// PromptFitsStep and GuaranteedNoEvict are the engine family's
	// scheduler rules (Config's), and KVFreeFraction its KV cache's share
	// of the memory the weights leave (perfmodel.Config's), set by
	// WithEngine.
	PromptFitsStep    bool `json:"prompt_fits_step"`
	GuaranteedNoEvict bool `json:"guaranteed_no_evict"`
	// SeparatePrefill is the engine family's rule that prompt work and
	// decodes never share a step (Config's), set by WithEngine.
	SeparatePrefill bool `json:"separate_prefill"`
	// AdmitPerStep is the engine family's most admissions a step
	// (Config's; Ollama's 1), set by WithEngine; 0: no limit.
	AdmitPerStep     int     `json:"admit_per_step,omitempty"`
	KVFreeFraction   float64 `json:"kv_free_fraction"`
	SpeculativeK     int     `json:"speculative_k"`     // speculative_k: draft tokens per step; 0: off
	SpeculativeAlpha float64 `json:"speculative_alpha"` // speculative_alpha: per-token acceptance rate
	DraftModel       string  `json:"draft_model"`       // draft_model: catalog name or config.json
	// Profile (profile) is a performance profile file (tokentrace
	// calibrate) for this model, GPU, TP and precisions: its fitted
	// constants time every step instead of the GPU family's defaults.
	Profile          string `json:"profile"`
	SchedulingPolicy string `json:"scheduling_policy"` // scheduling_policy: fcfs or priority
	// NaturalOutputTokens (natural_output_tokens) is where answers would
	// end on their own, in workload.ParseDist's vocabulary, or "max"
	// (ParseOutputLength); empty means DefaultOutputLength.
	NaturalOutputTokens string `json:"natural_output_tokens"`
	// ReasoningTokens (reasoning_tokens) is how many of an answer's first
	// tokens a reasoning model spends thinking, in workload.ParseDist's
	// vocabulary; empty: no reasoning.
	ReasoningTokens string `json:"reasoning_tokens"`
	Seed            uint64 `json:"seed"` // seed of output lengths and speculative acceptance
}

// DefaultMaxModelLen is the context length used when MaxModelLen is 0
// and the model's own context length (config.json's
// max_position_embeddings) is unknown; either is lowered to the KV cache's
// capacity when that is smaller.
const DefaultMaxModelLen = 8192

// DefaultModelLen is vLLM's default max_model_len: the model's context
// length (DefaultMaxModelLen when the catalog or config.json does not give
// one), lowered to kvTokens, what the KV cache holds.
func DefaultModelLen(m perfmodel.ModelSpec, kvTokens int) int {
	n := m.MaxContext
	if n <= 0 {
		n = DefaultMaxModelLen
	}
	return min(n, kvTokens)
}

// DefaultOptions are `tokentrace serve`'s defaults: Llama-3.1-8B on one
// H100-SXM with vLLM's settings.
func DefaultOptions() Options {
	return Options{
		Model: "Llama-3.1-8B", GPU: "H100-SXM", TensorParallelSize: 1, DType: "bf16", KVCacheDType: "auto",
		GPUMemoryUtilization: perfmodel.DefaultMemUtil, BlockSize: 16, EnableChunkedPrefill: true,
		SchedulingPolicy: PolicyFCFS, NaturalOutputTokens: DefaultOutputLength.String(),
	}
}

// Config resolves the options into an engine configuration timed by the
// performance model, whose estimator it also returns.
func (o Options) Config() (Config, *perfmodel.Estimator, error) {
	if err := o.Validate(); err != nil {
		return Config{}, nil, err
	}
	pc, err := o.perfConfig()
	if err != nil {
		return Config{}, nil, err
	}
	if pc.TP == 0 {
		if pc.TP = perfmodel.MinTP(pc); pc.TP == 0 {
			pc.TP = perfmodel.LargestTP(pc.Model)
			_, err := perfmodel.New(pc)
			return Config{}, nil, field.Errorf("tensor_parallel_size", "%v (tried 1 to %d)", err, pc.TP)
		}
	}
	est, err := perfmodel.New(pc)
	if err != nil {
		return Config{}, nil, err
	}
	out := workload.Dist(nil)
	if o.NaturalOutputTokens != "" {
		if out, err = ParseOutputLength(o.NaturalOutputTokens); err != nil {
			return Config{}, nil, field.Invalid("natural_output_tokens", o.NaturalOutputTokens, "%w", err)
		}
	}
	var think workload.Dist
	if o.ReasoningTokens != "" {
		if think, err = workload.ParseDist(o.ReasoningTokens, "output"); err != nil {
			return Config{}, nil, field.Invalid("reasoning_tokens", o.ReasoningTokens, "%w", err)
		}
	}
	ec := FromEstimator(Config{
		BlockSize: o.BlockSize, NumBlocks: o.NumGPUBlocksOverride, MaxModelLen: o.MaxModelLen,
		MaxNumSeqs: o.MaxNumSeqs, MaxNumBatchedTokens: o.MaxNumBatchedTokens,
		DisableChunkedPrefill: !o.EnableChunkedPrefill, EnablePrefixCaching: o.EnablePrefixCaching,
		PromptFitsStep: o.PromptFitsStep, GuaranteedNoEvict: o.GuaranteedNoEvict, SeparatePrefill: o.SeparatePrefill,
		AdmitPerStep: o.AdmitPerStep,
		Speculative:  Speculative{K: o.SpeculativeK, Alpha: o.SpeculativeAlpha},
		Policy:       o.SchedulingPolicy, OutputLength: out, Reasoning: think, MaxWaiting: o.MaxWaiting, Seed: o.Seed,
	}, est)
	if ec.NumBlocks < 1 {
		return Config{}, nil, field.Invalid("gpu_memory_utilization", o.GPUMemoryUtilization,
			"%s on %d × %s leaves no memory for the KV cache; raise it, add GPUs ({tensor_parallel_size}) or use a smaller {dtype}",
			pc.Model.Name, pc.TP, pc.GPU.Name)
	}
	if ec.MaxModelLen == 0 {
		ec.MaxModelLen = DefaultModelLen(pc.Model, ec.NumBlocks*ec.BlockSize-ec.Speculative.K)
	}
	if err := ec.WithDefaults().Validate(); err != nil {
		return Config{}, nil, err
	}
	return ec, est, nil
}

// Validate rejects, naming the field, the numbers that cannot be meant:
// those Config would read as "the default" (0) or that the performance
// model takes otherwise, NaN, and negative counts; the rest
// Config.Validate judges on the resolved configuration. Every command
// that takes engine settings (serve, simulate, plan, calibrate, bench's
// embedded engine) checks them here, before anything runs.
func (o Options) Validate() error {
	switch {
	case o.BlockSize < 1:
		return field.Invalid("block_size", o.BlockSize, "must be at least 1")
	case o.TensorParallelSize < 0:
		return field.Invalid("tensor_parallel_size", o.TensorParallelSize, "must be at least 1, or 0 for the smallest that fits")
	case !(o.GPUMemoryUtilization > 0 && o.GPUMemoryUtilization <= 1):
		return field.Invalid("gpu_memory_utilization", o.GPUMemoryUtilization, "must be in (0, 1]")
	case o.SpeculativeAlpha != 0 && !(o.SpeculativeAlpha > 0 && o.SpeculativeAlpha <= 1):
		return field.Invalid("speculative_alpha", o.SpeculativeAlpha, "must be in (0, 1]")
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"max_num_seqs", o.MaxNumSeqs}, {"max_num_batched_tokens", o.MaxNumBatchedTokens}, {"num_gpu_blocks_override", o.NumGPUBlocksOverride},
		{"max_model_len", o.MaxModelLen}, {"max_waiting", o.MaxWaiting}, {"speculative_k", o.SpeculativeK}} {
		if err := field.Count(c.name, c.v); err != nil {
			return err
		}
	}
	return nil
}

// perfConfig resolves the names into the performance model's configuration.
func (o Options) perfConfig() (perfmodel.Config, error) {
	model, err := perfmodel.ResolveModel(o.Model)
	if err != nil {
		return perfmodel.Config{}, field.Wrap("model", err)
	}
	cat, err := perfmodel.GPUCatalogFor(o.GPUFile)
	if err != nil {
		return perfmodel.Config{}, field.Wrap("gpu_file", err)
	}
	gpu, err := cat.Lookup(o.GPU)
	if err != nil {
		return perfmodel.Config{}, field.Wrap("gpu", err)
	}
	pc := perfmodel.Config{Model: model, GPU: gpu, TP: o.TensorParallelSize, MemUtil: o.GPUMemoryUtilization, KVFreeFraction: o.KVFreeFraction}
	dtype := o.DType
	if dtype == "" || dtype == "auto" { // vLLM's auto: the checkpoint's, bf16 for the catalog's
		dtype = string(perfmodel.BF16)
	}
	if pc.WeightDType, err = perfmodel.ParseDType(dtype); err != nil {
		return perfmodel.Config{}, field.Wrap("dtype", err)
	}
	if pc.KVDType, err = perfmodel.ParseDType(perfmodel.KVDTypeFor(o.KVCacheDType, pc.WeightDType)); err != nil {
		return perfmodel.Config{}, field.Wrap("kv_cache_dtype", err)
	}
	if o.DraftModel != "" {
		d, err := perfmodel.ResolveModel(o.DraftModel)
		if err != nil {
			return perfmodel.Config{}, field.Wrap("draft_model", err)
		}
		pc.DraftModel = &d
	}
	eff, ok, err := o.familyConstants(gpu.Name, pc.WeightDType)
	if err != nil {
		return perfmodel.Config{}, err
	}
	if ok {
		pc.Eff = eff
	}
	pc.UBatch = o.familyUBatch()
	pc.EagerLayer, pc.EagerAbove = o.familyEagerLayer(pc.Model)
	if o.Profile != "" {
		prof, err := perfmodel.LoadProfile(o.Profile)
		if err != nil {
			return perfmodel.Config{}, field.Wrap("profile", err)
		}
		if pc.TP == 0 {
			pc.TP = prof.TP
		}
		if err := prof.Matches(pc.Model, pc.GPU, pc.TP, pc.WeightDType, pc.KVDType); err != nil {
			return perfmodel.Config{}, field.Invalid("profile", o.Profile, "%w", err)
		}
		if err := o.profileEngine(prof); err != nil {
			return perfmodel.Config{}, err
		}
		pc.Eff = prof.Efficiency()
	}
	return pc, nil
}

// profileEngine refuses a profile fitted on another engine family than
// o's: its constants carry that engine's kernels and scheduler costs.
func (o Options) profileEngine(prof *perfmodel.Profile) error {
	if o.Engine == "" || prof.Engine == "" {
		return nil
	}
	want, err := LookupFamily(o.Engine)
	if err != nil {
		return field.Wrap("engine", err)
	}
	if got, ok := FamilyOf(prof.Engine); ok && got.Name != want.Name {
		return field.Invalid("profile", o.Profile, "was fitted on engine %s, not %s", prof.Engine, want.Name)
	}
	return nil
}
