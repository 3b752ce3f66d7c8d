package perfmodel

import (
	"fmt"
	"math"
	"time"

	"github.com/tokentrace/tokentrace/internal/field"
)

// Workload is what a derived estimate is asked about: B concurrent requests
// of Input prompt tokens and Output generated tokens each, optionally with
// speculative decoding (SpecK draft tokens per step, acceptance rate
// SpecAlpha).
type Workload struct {
	Input, Output int
	Batch         int
	SpecK         int
	SpecAlpha     float64
}

// MaxLength bounds Input + Output so that no estimate loops or overflows.
const MaxLength = 10_000_000

// Validate rejects lengths ≤ 0, a batch < 1, k < 1 or α outside [0, 1)
// when speculative decoding is asked for.
func (w Workload) Validate() error {
	if w.Input <= 0 {
		return field.Invalid("input_tokens", w.Input, "input length must be > 0")
	}
	if w.Output <= 0 {
		return field.Invalid("output_tokens", w.Output, "output length must be > 0")
	}
	if w.Input+w.Output > MaxLength || w.Input > MaxLength || w.Output > MaxLength {
		return field.Errorf("input_tokens", "{input_tokens} + {output_tokens} must be ≤ %d tokens", MaxLength)
	}
	if w.Batch < 1 || w.Batch > 1_000_000 {
		return field.Invalid("batch", w.Batch, "batch size must be in [1, 1000000]")
	}
	if w.SpecK != 0 || w.SpecAlpha != 0 {
		if w.SpecK < 1 || w.SpecK > 64 {
			return field.Invalid("speculative_k", w.SpecK, "speculative draft length k must be in [1, 64]")
		}
		if !(w.SpecAlpha >= 0 && w.SpecAlpha < 1) {
			return field.Invalid("speculative_alpha", w.SpecAlpha, "speculative acceptance rate α must be in [0, 1)")
		}
	}
	return nil
}

// Shares is each term's fraction of a step's total time. Compute and Memory
// overlap (the step pays only the larger), so the smaller one's share is
// time hidden under the other.
type Shares struct {
	Compute  float64 `json:"compute"`
	Memory   float64 `json:"memory"`
	Comm     float64 `json:"comm"`
	Overhead float64 `json:"overhead"`
	Draft    float64 `json:"draft,omitempty"`
}

// SharesOf computes s's shares.
func SharesOf(s Step) Shares {
	t := s.Total.Seconds()
	if t <= 0 {
		return Shares{}
	}
	return Shares{
		Compute:  s.Compute.Seconds() / t,
		Memory:   s.Memory.Seconds() / t,
		Comm:     s.Comm.Seconds() / t,
		Overhead: s.Overhead.Seconds() / t,
		Draft:    s.Draft.Seconds() / t,
	}
}

// Estimate is the derived answers for one Workload.
type Estimate struct {
	Batch int `json:"batch"`
	// TTFT is the prefill step of one request's prompt while Batch − 1
	// others decode beside it (Batch = 1: unloaded).
	TTFT time.Duration `json:"ttft"`
	// TPOT is the mean decode step over the output at this batch size.
	TPOT time.Duration `json:"tpot"`
	// E2E = TTFT + (Output − 1) × TPOT.
	E2E time.Duration `json:"e2e"`
	// UserTokPerSec = 1 / TPOT; TotalTokPerSec = Batch × Output / E2E.
	UserTokPerSec  float64 `json:"user_tok_per_s"`
	TotalTokPerSec float64 `json:"total_tok_per_s"`
	// KVBytesPerSeq = (Input + Output) × KV bytes per token.
	KVBytesPerSeq int64 `json:"kv_bytes_per_seq"`
	// MaxConcurrentSeqs = KV capacity in tokens / (Input + Output).
	MaxConcurrentSeqs int64 `json:"max_concurrent_seqs"`
	// FitsKV reports Batch ≤ MaxConcurrentSeqs.
	FitsKV bool `json:"fits_kv"`
	// Prefill is the TTFT step; Decode is the decode step at the mean
	// context (Input + Output/2).
	Prefill Step `json:"prefill_step"`
	Decode  Step `json:"decode_step"`
	// Bound is what rules the decode step: "compute" or "memory".
	Bound  string `json:"bound"`
	Shares Shares `json:"shares"`
	// Intensity is the decode step's FLOPs per byte; Ridge is the GPU's
	// achieved FLOP/s over achieved B/s, where the bound changes.
	Intensity float64 `json:"intensity"`
	Ridge     float64 `json:"ridge"`
	// Spec is set when speculative decoding is modelled.
	Spec *SpecEstimate `json:"spec,omitempty"`
}

// SpecEstimate is speculative decoding at one batch size.
type SpecEstimate struct {
	K     int     `json:"k"`
	Alpha float64 `json:"alpha"`
	// ExpectedTokens per target step: (1 − α^(k+1)) / (1 − α).
	ExpectedTokens float64 `json:"expected_tokens"`
	// Step is the verify step (k+1 tokens per sequence) plus the draft
	// model's k steps, at the mean context.
	Step Step `json:"step"`
	// TPOT is the mean (verify + draft) step over ExpectedTokens.
	TPOT time.Duration `json:"tpot"`
	// Speedup is the plain TPOT over the speculative one (< 1: it hurts).
	Speedup float64 `json:"speedup"`
	// BreakEvenAlpha is the acceptance rate at which Speedup = 1: above it
	// speculation helps. 0 when it helps at any α; −1 when it never does.
	BreakEvenAlpha float64 `json:"break_even_alpha"`
	// Bound is what rules the verify step.
	Bound string `json:"bound"`
}

// ExpectedTokens is the expected tokens one speculative step yields with
// draft length k and per-token acceptance rate α: (1 − α^(k+1)) / (1 − α).
func ExpectedTokens(k int, alpha float64) float64 {
	if alpha <= 0 {
		return 1
	}
	if alpha >= 1 {
		return float64(k + 1)
	}
	return (1 - math.Pow(alpha, float64(k+1))) / (1 - alpha)
}

// PrefillStep is one prompt of n tokens computed in a single step with
// nothing else in the batch: the unloaded TTFT.
func (e *Estimator) PrefillStep(n int) Step {
	return e.step(agg{seqs: 1, tokens: float64(n), rows: 1, pairs: float64(n) * float64(n+1) / 2})
}

// TTFT is the unloaded time to first token for a prompt of input tokens.
func (e *Estimator) TTFT(input int) (time.Duration, error) {
	if input <= 0 || input > MaxLength {
		return 0, fmt.Errorf("input length must be in [1, %d] (got %d)", MaxLength, input)
	}
	return e.PrefillStep(input).Total, nil
}

// DecodeStep is a step of batch sequences decoding one token each, each
// with ctx tokens already cached.
func (e *Estimator) DecodeStep(batch, ctx int) Step {
	b, c := float64(batch), float64(ctx)
	return e.step(agg{seqs: b, tokens: b, rows: b, ctx: b * c, pairs: b * (c + 1)})
}

// verifyStep is a speculative step: batch sequences verifying k+1 tokens
// each at context ctx, plus the draft model's k single-token steps.
func (e *Estimator) verifyStep(batch, ctx, k int) Step {
	b, c, n := float64(batch), float64(ctx), float64(k+1)
	s := e.step(agg{seqs: b, tokens: b * n, rows: b * n, ctx: b * c, pairs: b * n * (c + (n+1)/2)})
	if e.draft != nil {
		var d time.Duration
		for j := 0; j < k; j++ {
			d += e.draft.DecodeStep(batch, ctx+j).Total
		}
		s.Draft = d
		s.Total += d
	}
	return s
}

// maxSamples bounds the decode steps evaluated per estimate; longer outputs
// are sampled at evenly spaced contexts.
const maxSamples = 4096

// meanOverOutput averages f over the contexts of decode steps 1 … output−1
// (context input + j − 1), sampling when output is long.
func meanOverOutput(input, output int, f func(ctx int) time.Duration) time.Duration {
	n := output - 1
	if n <= 0 {
		return f(input)
	}
	stride := 1
	if n > maxSamples {
		stride = (n + maxSamples - 1) / maxSamples
	}
	var sum float64
	var cnt int
	for j := 1; j <= n; j += stride {
		sum += float64(f(input + j - 1))
		cnt++
	}
	return time.Duration(math.Round(sum / float64(cnt)))
}

// TPOT is the mean decode step for batch sequences generating output tokens
// after input prompt tokens.
func (e *Estimator) TPOT(batch, input, output int) time.Duration {
	return meanOverOutput(input, output, func(c int) time.Duration { return e.DecodeStep(batch, c).Total })
}

// StaticBatchTime is the end-to-end time of a static batch: batch prompts of
// input tokens prefilled in one step, then output − 1 decode steps (how
// offline latency benchmarks run).
func (e *Estimator) StaticBatchTime(batch, input, output int) time.Duration {
	b, n := float64(batch), float64(input)
	pre := e.step(agg{seqs: b, tokens: b * n, rows: b, pairs: b * n * (n + 1) / 2}).Total
	if output <= 1 {
		return pre
	}
	return pre + time.Duration(output-1)*e.TPOT(batch, input, output)
}

// Estimate derives the answers for w. Speculation without a draft model
// (n-gram or prompt-lookup proposals) costs only the verify step.
func (e *Estimator) Estimate(w Workload) (Estimate, error) {
	if err := w.Validate(); err != nil {
		return Estimate{}, err
	}
	var r Estimate
	r.Batch = w.Batch
	mid := w.Input + w.Output/2
	// TTFT: this request's prefill beside Batch−1 decodes at the mean context.
	n := float64(w.Input)
	others := float64(w.Batch - 1)
	c := float64(mid)
	r.Prefill = e.step(agg{
		seqs: 1 + others, tokens: n + others, rows: 1 + others,
		ctx:   others * c,
		pairs: n*(n+1)/2 + others*(c+1),
	})
	r.TTFT = r.Prefill.Total
	r.TPOT = e.TPOT(w.Batch, w.Input, w.Output)
	r.E2E = r.TTFT + time.Duration(w.Output-1)*r.TPOT
	if r.TPOT > 0 {
		r.UserTokPerSec = 1 / r.TPOT.Seconds()
	}
	if r.E2E > 0 {
		r.TotalTokPerSec = float64(w.Batch) * float64(w.Output) / r.E2E.Seconds()
	}
	per := e.KVBytesPerToken()
	r.KVBytesPerSeq = int64(w.Input+w.Output) * per
	r.MaxConcurrentSeqs = e.kvCapacity / int64(w.Input+w.Output)
	r.FitsKV = int64(w.Batch) <= r.MaxConcurrentSeqs
	r.Decode = e.DecodeStep(w.Batch, mid)
	r.Bound = r.Decode.Bound
	r.Shares = SharesOf(r.Decode)
	r.Intensity = r.Decode.Intensity()
	r.Ridge = e.linPeak / e.bw
	if r.Decode.Cached {
		r.Ridge = e.linPeak / e.cacheBW
	}
	if w.SpecK > 0 {
		s := &SpecEstimate{K: w.SpecK, Alpha: w.SpecAlpha, ExpectedTokens: ExpectedTokens(w.SpecK, w.SpecAlpha)}
		s.Step = e.verifyStep(w.Batch, mid, w.SpecK)
		s.Bound = s.Step.Bound
		verify := meanOverOutput(w.Input, w.Output, func(c int) time.Duration { return e.verifyStep(w.Batch, c, w.SpecK).Total })
		s.TPOT = time.Duration(math.Round(float64(verify) / s.ExpectedTokens))
		if s.TPOT > 0 {
			s.Speedup = r.TPOT.Seconds() / s.TPOT.Seconds()
		}
		s.BreakEvenAlpha = breakEven(w.SpecK, float64(verify)/float64(r.TPOT))
		r.Spec = s
	}
	return r, nil
}

// breakEven is the α at which ExpectedTokens(k, α) equals ratio (speculative
// step time over plain step time): 0 when ratio ≤ 1, −1 when ratio ≥ k+1.
func breakEven(k int, ratio float64) float64 {
	if math.IsNaN(ratio) || ratio <= 1 {
		return 0
	}
	if ratio >= float64(k+1) {
		return -1
	}
	lo, hi := 0.0, 1.0
	for range 60 {
		mid := (lo + hi) / 2
		if ExpectedTokens(k, mid) < ratio {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}
