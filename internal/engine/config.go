package engine

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/perfmodel"
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

// Output-length distributions for OutputLength.Dist.
const (
	DistLognormal   = "lognormal"   // mean Mean, shape Sigma (default 1)
	DistExponential = "exponential" // mean Mean
	DistUniform     = "uniform"     // integers in [Min, Max]
	DistFixed       = "fixed"       // always Mean
	DistMax         = "max"         // always max_tokens (never stops early)
)

// OutputLength is the distribution of the natural output length (where the
// model would emit its end of sequence). The drawn length is raised to
// min_tokens and capped by max_tokens; ignore_eos skips the draw.
type OutputLength struct {
	Dist     string
	Mean     float64
	Sigma    float64
	Min, Max int
}

// DefaultOutputLength is used when Config.OutputLength.Dist is empty.
var DefaultOutputLength = OutputLength{Dist: DistLognormal, Mean: 256, Sigma: 1}

func (o OutputLength) String() string {
	switch o.Dist {
	case DistLognormal:
		return fmt.Sprintf("lognormal(mean=%g, sigma=%g)", o.Mean, o.Sigma)
	case DistExponential:
		return fmt.Sprintf("exponential(mean=%g)", o.Mean)
	case DistUniform:
		return fmt.Sprintf("uniform[%d, %d]", o.Min, o.Max)
	case DistFixed:
		return fmt.Sprintf("fixed(%g)", o.Mean)
	case DistMax:
		return "max_tokens"
	}
	return o.Dist
}

func (o OutputLength) validate() error {
	switch o.Dist {
	case DistLognormal:
		if !(o.Mean >= 1) || o.Sigma < 0 || math.IsInf(o.Mean, 0) || math.IsNaN(o.Sigma) {
			return fmt.Errorf("lognormal output length needs mean >= 1 and sigma >= 0 (got mean %g, sigma %g)", o.Mean, o.Sigma)
		}
	case DistExponential, DistFixed:
		if !(o.Mean >= 1) || math.IsInf(o.Mean, 0) {
			return fmt.Errorf("%s output length needs mean >= 1 (got %g)", o.Dist, o.Mean)
		}
	case DistUniform:
		if o.Min < 1 || o.Max < o.Min {
			return fmt.Errorf("uniform output length needs 1 <= min <= max (got [%d, %d])", o.Min, o.Max)
		}
	case DistMax:
	default:
		return fmt.Errorf("unknown output length distribution %q (want lognormal, exponential, uniform, fixed or max)", o.Dist)
	}
	return nil
}

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
	// EnablePrefixCaching reuses cached KV blocks of shared prompt prefixes.
	EnablePrefixCaching bool
	// Speculative configures speculative decoding (off when K = 0).
	Speculative Speculative
	// Policy is PolicyFCFS (default) or PolicyPriority.
	Policy string
	// OutputLength is the natural output-length distribution
	// (DefaultOutputLength when Dist is empty).
	OutputLength OutputLength
	// MaxWaiting bounds the waiting queue; Submit returns ErrQueueFull
	// beyond it. 0 means unbounded.
	MaxWaiting int
	// Seed seeds the engine's random source (output lengths, speculative
	// acceptance).
	Seed uint64
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
		if c.DisableChunkedPrefill {
			c.MaxNumBatchedTokens = max(dt, c.MaxModelLen)
		}
	}
	if c.Policy == "" {
		c.Policy = PolicyFCFS
	}
	if c.OutputLength.Dist == "" {
		c.OutputLength = DefaultOutputLength
	}
	if c.OutputLength.Dist == DistLognormal && c.OutputLength.Sigma == 0 && c.OutputLength.Mean == 0 {
		c.OutputLength.Sigma = 1
	}
	return c
}

// Validate reports why c (after WithDefaults) cannot run.
func (c Config) Validate() error {
	switch {
	case c.StepTimer == nil:
		return fmt.Errorf("engine config: no step timer (performance model)")
	case c.BlockSize < 1:
		return fmt.Errorf("engine config: block size must be at least 1 (got %d)", c.BlockSize)
	case c.NumBlocks < 1:
		return fmt.Errorf("engine config: the KV cache has %d blocks; the model does not fit in GPU memory or the KV cache was not sized", c.NumBlocks)
	case c.MaxModelLen < 2:
		return fmt.Errorf("engine config: max_model_len must be at least 2 (got %d)", c.MaxModelLen)
	case c.MaxNumSeqs < 1:
		return fmt.Errorf("engine config: max_num_seqs must be at least 1 (got %d)", c.MaxNumSeqs)
	case c.MaxNumBatchedTokens < c.BlockSize:
		return fmt.Errorf("engine config: max_num_batched_tokens %d is below one block (%d tokens)", c.MaxNumBatchedTokens, c.BlockSize)
	case c.DisableChunkedPrefill && c.MaxNumBatchedTokens < c.MaxModelLen:
		return fmt.Errorf("engine config: with chunked prefill off, max_num_batched_tokens (%d) must be at least max_model_len (%d)", c.MaxNumBatchedTokens, c.MaxModelLen)
	case c.Speculative.K < 0 || c.Speculative.K > 64:
		return fmt.Errorf("engine config: speculative draft length must be in 0..64 (got %d)", c.Speculative.K)
	case c.Speculative.K > 0 && !(c.Speculative.Alpha >= 0 && c.Speculative.Alpha <= 1):
		return fmt.Errorf("engine config: speculative acceptance rate must be in [0, 1] (got %g)", c.Speculative.Alpha)
	case c.Speculative.K > 0 && c.MaxNumBatchedTokens < c.Speculative.K+1:
		return fmt.Errorf("engine config: max_num_batched_tokens %d cannot hold one speculative verify (%d tokens)", c.MaxNumBatchedTokens, c.Speculative.K+1)
	case c.Policy != PolicyFCFS && c.Policy != PolicyPriority:
		return fmt.Errorf("engine config: unknown scheduling policy %q (want fcfs or priority)", c.Policy)
	case c.MaxWaiting < 0:
		return fmt.Errorf("engine config: max waiting must be >= 0 (got %d)", c.MaxWaiting)
	}
	if need := c.MaxModelLen + c.Speculative.K; c.NumBlocks*c.BlockSize < need {
		return fmt.Errorf("engine config: the KV cache holds %d tokens (%d blocks of %d), fewer than max_model_len %d needs; lower max_model_len or raise GPU memory utilization",
			c.NumBlocks*c.BlockSize, c.NumBlocks, c.BlockSize, need)
	}
	if err := c.OutputLength.validate(); err != nil {
		return fmt.Errorf("engine config: %w", err)
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
	fmt.Fprintf(&b, "  max_model_len=%d max_num_batched_tokens=%d max_num_seqs=%d chunked_prefill=%s prefix_caching=%s scheduling=%s\n",
		c.MaxModelLen, c.MaxNumBatchedTokens, c.MaxNumSeqs, onOff(!c.DisableChunkedPrefill), onOff(c.EnablePrefixCaching), c.Policy)
	spec := "off"
	if c.Speculative.K > 0 {
		spec = fmt.Sprintf("k=%d alpha=%g", c.Speculative.K, c.Speculative.Alpha)
	}
	waiting := "unbounded"
	if c.MaxWaiting > 0 {
		waiting = fmt.Sprint(c.MaxWaiting)
	}
	fmt.Fprintf(&b, "  speculative=%s output_length=%s max_waiting=%s seed=%d", spec, c.OutputLength, waiting, c.Seed)
	return b.String()
}
