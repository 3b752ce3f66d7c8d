package engine

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// StepTimer prices one engine step: the performance model's
// (*perfmodel.Estimator).StepTime satisfies it. It must not retain the batch.
type StepTimer interface {
	StepTime(b *perfmodel.Batch) time.Duration
}

// StepTimerFunc adapts a function to StepTimer.
type StepTimerFunc func(b *perfmodel.Batch) time.Duration

// StepTime calls f(b).
func (f StepTimerFunc) StepTime(b *perfmodel.Batch) time.Duration { return f(b) }

// Scheduling policies.
const (
	PolicyFCFS     = "fcfs"     // first come, first served (the default)
	PolicyPriority = "priority" // by (Request.Priority, arrival)
)

// Speculative configures speculative decoding; K = 0 turns it off.
type Speculative struct {
	// K is the draft length: tokens proposed per decoding sequence per step.
	K int
	// Alpha is the probability that each draft token is accepted, given the
	// previous ones were (the geometric acceptance model).
	Alpha float64
}

// DefaultOutputLength is the natural output length when
// Config.OutputLength is nil: log-normal with mean 256 and shape 1.
var DefaultOutputLength workload.Dist = workload.LogNormal{MeanLen: 256, Sigma: 1}

// OutputToMaxTokens is the natural length of a model that never ends early:
// every answer runs to its max_tokens. Its spec is "max".
var OutputToMaxTokens workload.Dist = untilMax{}

// ParseOutputLength reads a natural output length: "max"
// (OutputToMaxTokens) or a length distribution in workload.ParseDist's
// vocabulary, e.g. lognormal:mean=256,sigma=1.
func ParseOutputLength(spec string) (workload.Dist, error) {
	if strings.EqualFold(strings.TrimSpace(spec), "max") {
		return OutputToMaxTokens, nil
	}
	return workload.ParseDist(spec, "output")
}

type untilMax struct{}

func (untilMax) Sample(*rand.Rand) int { return workload.MaxLen }
func (untilMax) Mean() float64         { return workload.MaxLen }
func (untilMax) String() string        { return "max" }
func (untilMax) Validate() error       { return nil }

// Config configures an engine. Zero fields take the defaults documented on
// each; Describe prints the values in force.
type Config struct {
	// Model and GPU name what is simulated, for Describe.
	Model, GPU string
	// GPUMemoryBytes is one GPU's memory; with GPU it selects the default
	// batch limits (vLLM's: 8192 tokens / 1024 sequences on cards of at
	// least 70 GiB other than A100, 2048 / 256 otherwise).
	GPUMemoryBytes int64
	// WeightBytes and KVBytesPerToken are informational (Describe).
	WeightBytes, KVBytesPerToken int64

	// StepTimer prices every step. Required.
	StepTimer StepTimer

	// BlockSize is the KV block size in tokens (default 16).
	BlockSize int
	// NumBlocks is the KV cache capacity in blocks. Required: FromEstimator
	// derives it from the performance model.
	NumBlocks int
	// MaxModelLen is the longest prompt + output a request may have.
	// Required.
	MaxModelLen int
	// MaxNumSeqs bounds the running requests; MaxNumBatchedTokens the tokens
	// computed per step. Defaults by GPU class (see GPUMemoryBytes); with
	// chunked prefill off the token budget is at least MaxModelLen.
	MaxNumSeqs, MaxNumBatchedTokens int
	// DisableChunkedPrefill schedules whole prompts only (vLLM's
	// --enable-chunked-prefill=false); chunked prefill is on by default.
	DisableChunkedPrefill bool
	// PromptFitsStep is TensorRT-LLM's rule with chunked prefill off: the
	// token budget must hold each request's prompt (a longer one is
	// refused at submit), not its whole sequence; false: vLLM's rule, the
	// budget at least MaxModelLen.
	PromptFitsStep bool
	// GuaranteedNoEvict admits a request only when the free KV blocks hold
	// its prompt and all of its max_tokens, reserved at admission, so that
	// none is ever preempted (TensorRT-LLM's default capacity scheduler,
	// GUARANTEED_NO_EVICT).
	GuaranteedNoEvict bool
	// SeparatePrefill never mixes prompt work and decodes in one step: a
	// step computes the running prompts' next chunks and newly admitted
	// prompts while there are any, the decodes waiting, and decodes only
	// when there are none (SGLang's default, enable_mixed_chunk off);
	// false: vLLM's steps, decodes first and prompt chunks in the
	// budget left.
	SeparatePrefill bool
	// RecvInterval is SGLang's --scheduler-recv-interval: the scheduler
	// takes newly arrived requests into its waiting queue only every
	// RecvInterval decode steps (a step with prompt work, or nothing to
	// run, lets it take them at once; SchedulerRecvSkipper: decode and
	// idle iterations weigh 1, others 1,000). 0 or 1: at every step, as
	// every engine does by default. FCFS scheduling only.
	RecvInterval int
	// AdmitPerStep is the most waiting requests a step admits; 0: as many
	// as the budget, the slots and the KV cache allow. Ollama's runner
	// (runner/llamarunner) takes each request over HTTP into a free slot
	// under the lock its batch loop holds for a whole step, one request
	// after another between steps (docs/engines.md, "Engine families"):
	// 1 there, where every other engine admits all that fit.
	AdmitPerStep int
	// BatchWaitIters and BatchWaitTokens are TensorRT-LLM's batch waiting
	// (batch_wait_timeout_iters, and batch_wait_max_tokens_ratio ×
	// max_num_tokens): while requests decode, waiting prompts are held
	// back until the step's tokens (the decodes and the prompts that fit
	// the budget) reach BatchWaitTokens or BatchWaitIters steps have held
	// them. Both 0 (either 0, as TensorRT-LLM's check reads): none.
	BatchWaitIters, BatchWaitTokens int
	// EnablePrefixCaching reuses cached KV blocks of shared prompt prefixes.
	EnablePrefixCaching bool
	// Speculative configures speculative decoding (off when K = 0).
	Speculative Speculative
	// Policy is PolicyFCFS (default) or PolicyPriority.
	Policy string
	// OutputLength is the natural output length: where the model would
	// emit its end of sequence, drawn per request, raised to min_tokens and
	// capped by max_tokens; ignore_eos skips the draw. Nil means
	// DefaultOutputLength.
	OutputLength workload.Dist
	// Reasoning is how many of an answer's first tokens are reasoning (a
	// reasoning model's thinking before its answer), drawn per request
	// from its own random source and capped by the answer's length: a
	// server streams them as reasoning deltas. Nil: no reasoning.
	Reasoning workload.Dist
	// MaxWaiting bounds the waiting queue; Submit returns ErrQueueFull
	// beyond it. 0 means unbounded.
	MaxWaiting int
	// Seed seeds the engine's random source (output lengths, speculative
	// acceptance).
	Seed uint64
	// KVLink times a RemotePrefill request's pull of KV cache from its
	// prefill instance: KVBytesPerToken × the tokens pulled over it, in
	// perfmodel.Link.TransferSharded's shards (min(TP, the request's
	// RemoteTP) of them). A zero link refuses RemotePrefill requests.
	KVLink perfmodel.Link
	// TP is the instance's tensor-parallel size (0: 1): each rank holds
	// its share of the KV heads and pulls it over its own link.
	TP int
}

const gib = 1 << 30

// defaultBlockSize is the KV block size in tokens when Config.BlockSize is 0.
const defaultBlockSize = 16

// DefaultBatchLimits returns vLLM's default max_num_batched_tokens and
// max_num_seqs for an OpenAI-compatible server on the given GPU.
func DefaultBatchLimits(gpu string, memBytes int64) (maxTokens, maxSeqs int) {
	if memBytes >= 70*gib && !strings.Contains(strings.ToLower(gpu), "a100") {
		return 8192, 1024
	}
	return 2048, 256
}

// WithDefaults returns c with every zero field set to its default. It does
// not validate.
func (c Config) WithDefaults() Config {
	if c.BlockSize == 0 {
		c.BlockSize = defaultBlockSize
	}
	dt, ds := DefaultBatchLimits(c.GPU, c.GPUMemoryBytes)
	if c.MaxNumSeqs == 0 {
		c.MaxNumSeqs = ds
	}
	if c.MaxNumBatchedTokens == 0 {
		c.MaxNumBatchedTokens = dt
		if c.DisableChunkedPrefill && !c.PromptFitsStep {
			c.MaxNumBatchedTokens = max(dt, c.MaxModelLen)
		}
	}
	if c.Policy == "" {
		c.Policy = PolicyFCFS
	}
	if c.OutputLength == nil {
		c.OutputLength = DefaultOutputLength
	}
	return c
}

// Validate reports why c (after WithDefaults) cannot run; a bad setting
// gives a *field.Error named as Options names it.
func (c Config) Validate() error {
	switch {
	case c.StepTimer == nil:
		return fmt.Errorf("engine config: no step timer (performance model)")
	case c.BlockSize < 1:
		return field.Invalid("block_size", c.BlockSize, "must be at least 1")
	case c.NumBlocks < 1:
		return field.Invalid("num_gpu_blocks_override", c.NumBlocks, "the KV cache has no blocks; the model does not fit in GPU memory or the KV cache was not sized")
	case c.MaxModelLen < 2:
		return field.Invalid("max_model_len", c.MaxModelLen, "must be at least 2")
	case c.MaxNumSeqs < 1:
		return field.Invalid("max_num_seqs", c.MaxNumSeqs, "must be at least 1")
	case c.MaxNumBatchedTokens < c.BlockSize:
		return field.Invalid("max_num_batched_tokens", c.MaxNumBatchedTokens, "below one block (%d tokens)", c.BlockSize)
	case c.DisableChunkedPrefill && !c.PromptFitsStep && c.MaxNumBatchedTokens < c.MaxModelLen:
		return field.Invalid("max_num_batched_tokens", c.MaxNumBatchedTokens, "with {enable_chunked_prefill} off, must be at least {max_model_len} (%d)", c.MaxModelLen)
	case c.Speculative.K < 0 || c.Speculative.K > 64:
		return field.Invalid("speculative_k", c.Speculative.K, "must be in 0..64")
	case c.Speculative.K > 0 && !(c.Speculative.Alpha >= 0 && c.Speculative.Alpha <= 1):
		return field.Invalid("speculative_alpha", c.Speculative.Alpha, "must be in [0, 1]")
	case c.Speculative.K > 0 && c.MaxNumBatchedTokens < c.Speculative.K+1:
		return field.Invalid("max_num_batched_tokens", c.MaxNumBatchedTokens, "cannot hold one speculative verify (%d tokens)", c.Speculative.K+1)
	case c.Policy != PolicyFCFS && c.Policy != PolicyPriority:
		return field.Invalid("scheduling_policy", c.Policy, "want fcfs or priority")
	case c.MaxWaiting < 0:
		return field.Invalid("max_waiting", c.MaxWaiting, "must not be negative")
	case c.AdmitPerStep < 0:
		return field.Invalid("admit_per_step", c.AdmitPerStep, "must not be negative")
	case c.RecvInterval < 0:
		return field.Invalid("scheduler_recv_interval", c.RecvInterval, "must not be negative")
	case c.BatchWaitIters < 0 || c.BatchWaitTokens < 0:
		return field.Invalid("batch_wait_timeout_iters", c.BatchWaitIters, "and the batch wait tokens (%d) must not be negative", c.BatchWaitTokens)
	case c.RecvInterval > 1 && c.Policy == PolicyPriority:
		return field.Invalid("scheduler_recv_interval", c.RecvInterval, "is modelled under fcfs scheduling only")
	case c.OutputLength == nil:
		return field.Errorf("natural_output_tokens", "no output length distribution")
	case c.KVLink != (perfmodel.Link{}) && c.KVLink.Validate() != nil:
		return field.Invalid("kv_link", c.KVLink.Name, "%w", c.KVLink.Validate())
	}
	if need := c.MaxModelLen + c.Speculative.K; c.NumBlocks*c.BlockSize < need {
		return field.Invalid("max_model_len", c.MaxModelLen, "the KV cache holds %d tokens (%d blocks of %d), fewer than %d; lower it or raise {gpu_memory_utilization}",
			c.NumBlocks*c.BlockSize, c.NumBlocks, c.BlockSize, need)
	}
	if err := c.OutputLength.Validate(); err != nil {
		return field.Invalid("natural_output_tokens", c.OutputLength, "%w", err)
	}
	if c.Reasoning != nil {
		if err := c.Reasoning.Validate(); err != nil {
			return field.Invalid("reasoning_tokens", c.Reasoning, "%w", err)
		}
	}
	return nil
}

// Describe returns the start banner: the configuration in force, with the
// defaults filled in.
func (c Config) Describe() string {
	c = c.WithDefaults()
	var b strings.Builder
	model := c.Model
	if model == "" {
		model = "(unnamed model)"
	}
	fmt.Fprintf(&b, "engine: %s", model)
	if c.GPU != "" {
		fmt.Fprintf(&b, " on %s", c.GPU)
		if c.GPUMemoryBytes > 0 {
			fmt.Fprintf(&b, " (%.0f GiB)", float64(c.GPUMemoryBytes)/gib)
		}
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  KV cache: %d blocks x %d tokens = %d tokens", c.NumBlocks, c.BlockSize, c.NumBlocks*c.BlockSize)
	if c.KVBytesPerToken > 0 {
		fmt.Fprintf(&b, " (%.2f GiB, %d bytes/token)", float64(int64(c.NumBlocks*c.BlockSize)*c.KVBytesPerToken)/gib, c.KVBytesPerToken)
	}
	if c.WeightBytes > 0 {
		fmt.Fprintf(&b, "; weights %.2f GiB", float64(c.WeightBytes)/gib)
	}
	b.WriteString("\n")
	onOff := func(v bool) string {
		if v {
			return "on"
		}
		return "off"
	}
	fmt.Fprintf(&b, "  max_model_len=%d max_num_batched_tokens=%d max_num_seqs=%d chunked_prefill=%s prefix_caching=%s scheduling=%s",
		c.MaxModelLen, c.MaxNumBatchedTokens, c.MaxNumSeqs, onOff(!c.DisableChunkedPrefill), onOff(c.EnablePrefixCaching), c.Policy)
	if c.DisableChunkedPrefill && c.PromptFitsStep {
		b.WriteString(" step_budget=prompt")
	}
	if c.GuaranteedNoEvict {
		b.WriteString(" capacity=guaranteed_no_evict")
	}
	if c.SeparatePrefill {
		b.WriteString(" mixed_steps=off")
	}
	if c.RecvInterval > 1 {
		fmt.Fprintf(&b, " recv_interval=%d", c.RecvInterval)
	}
	if c.AdmitPerStep > 0 {
		fmt.Fprintf(&b, " admit_per_step=%d", c.AdmitPerStep)
	}
	if c.BatchWaitIters > 0 && c.BatchWaitTokens > 0 {
		fmt.Fprintf(&b, " batch_wait=%d_steps/%d_tokens", c.BatchWaitIters, c.BatchWaitTokens)
	}
	b.WriteString("\n")
	spec := "off"
	if c.Speculative.K > 0 {
		spec = fmt.Sprintf("k=%d alpha=%g", c.Speculative.K, c.Speculative.Alpha)
	}
	waiting := "unbounded"
	if c.MaxWaiting > 0 {
		waiting = fmt.Sprint(c.MaxWaiting)
	}
	fmt.Fprintf(&b, "  speculative=%s output_length=%s max_waiting=%s seed=%d", spec, c.OutputLength, waiting, c.Seed)
	if c.Reasoning != nil {
		fmt.Fprintf(&b, " reasoning_tokens=%s", c.Reasoning)
	}
	return b.String()
}
