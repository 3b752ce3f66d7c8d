package engine

import (
	"errors"
	"fmt"
	"time"
)

// FinishReason tells why a request ended.
type FinishReason string

// Finish reasons, as in the OpenAI API.
const (
	FinishStop   FinishReason = "stop"   // the drawn output length was reached (an EOS)
	FinishLength FinishReason = "length" // max_tokens was reached
	FinishAbort  FinishReason = "abort"  // the caller went away or the engine stopped
)

// Errors returned by Submit; test with errors.Is.
var (
	ErrQueueFull     = errors.New("engine: waiting queue is full")
	ErrPromptTooLong = errors.New("engine: prompt too long")
	ErrInvalid       = errors.New("engine: invalid request")
	ErrStopped       = errors.New("engine: stopped")
)

// LengthError is the error for a request whose prompt plus max_tokens exceeds
// the model's context length. It matches ErrPromptTooLong under errors.Is.
type LengthError struct {
	PromptTokens, MaxTokens, MaxModelLen int
}

func (e *LengthError) Error() string {
	return fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
		e.MaxModelLen, e.PromptTokens+e.MaxTokens, e.PromptTokens, e.MaxTokens)
}

// Unwrap makes errors.Is(err, ErrPromptTooLong) true.
func (e *LengthError) Unwrap() error { return ErrPromptTooLong }

// Request is one generation request.
type Request struct {
	ID string
	// Prompt holds the prompt's token ids (internal/tokenizer); prefix
	// caching hashes its full blocks.
	Prompt []int32
	// PromptLen is the prompt length used when Prompt is nil: a prompt with
	// no token ids, which is never prefix-cached. Simulations of traces that
	// only know lengths use it. Ignored when Prompt is set.
	PromptLen int
	// MaxTokens caps the output tokens; at least 1.
	MaxTokens int
	// MinTokens is the fewest output tokens before an end of sequence.
	MinTokens int
	// IgnoreEOS makes the request produce exactly MaxTokens tokens.
	IgnoreEOS bool
	// Priority orders requests under the priority policy: lower is served
	// first (vLLM's convention). Ignored under FCFS.
	Priority int
	// RemotePrefill says a prefill instance computed the prompt (vLLM's
	// kv_transfer_params do_remote_prefill): once admitted, the request
	// holds blocks for its prompt while it pulls the full blocks its
	// prefix cache lacks over Config.KVLink, then computes the rest (the
	// partial last block, or the last token) in its first step, which
	// emits the first token (docs/engine.md, "Disaggregated prefill").
	RemotePrefill bool
	// RemoteTP is the prefill instance's tensor-parallel size (vLLM's
	// kv_transfer_params tp_size); 0: this instance's (Config.TP).
	RemoteTP int
}

func (r *Request) promptLen() int {
	if r.Prompt != nil {
		return len(r.Prompt)
	}
	return r.PromptLen
}

// Event is the tokens produced for one request by one engine step.
type Event struct {
	// At is the engine-clock instant the step ended, when the tokens exist.
	At time.Time
	// Tokens is how many tokens were emitted: 1 per step, up to k+1 under
	// speculative decoding, more when events were merged for a slow reader.
	// Only the final event of an aborted request may carry 0.
	Tokens int
	// Finish is empty until the request's last event.
	Finish FinishReason
}

// Timeline is the server-side life of one request.
type Timeline struct {
	// Arrival is when the engine received the request; Scheduled the start
	// of the first step that computed any of its prompt; FirstToken the end
	// of the step that emitted its first token; Finished when it ended.
	// An instant that did not happen (an abort while waiting) is zero.
	Arrival, Scheduled, FirstToken, Finished time.Time
	// FirstAnswer is the end of the step that emitted the first token
	// after the ReasoningTokens reasoning ones; zero when the request has
	// no reasoning, or none of its answer yet.
	FirstAnswer time.Time
	// PromptTokens is the prompt length; CachedTokens how many of them the
	// prefix cache supplied at first admission; OutputTokens how many
	// tokens were emitted.
	PromptTokens, CachedTokens, OutputTokens int
	// ReasoningTokens is how many of the first output tokens are reasoning
	// (Config.Reasoning): never more than OutputTokens, so that while the
	// answer streams, the tokens up to min(ReasoningTokens, tokens seen)
	// are reasoning.
	ReasoningTokens int
	// PrefillChunks counts the steps that computed prompt tokens (including
	// recomputation after a preemption); Preemptions how often the request
	// was preempted.
	PrefillChunks, Preemptions int
	Finish                     FinishReason
	// KVTransferStart and KVTransferEnd bound a RemotePrefill request's
	// pull of its prompt's KV cache (zero for any other request, or one
	// not yet admitted); KVTransferTokens is how many tokens' KV it pulled
	// (the prompt's full blocks less its prefix-cache hits).
	KVTransferStart, KVTransferEnd time.Time
	KVTransferTokens               int
}

// Queue is the time spent waiting before the first scheduled step, less
// a RemotePrefill request's KV transfer.
func (t Timeline) Queue() time.Duration { return span(t.Arrival, t.Scheduled) - t.KVTransfer() }

// KVTransfer is a RemotePrefill request's pull of its prompt's KV cache.
func (t Timeline) KVTransfer() time.Duration { return span(t.KVTransferStart, t.KVTransferEnd) }

// Prefill is the time from the first scheduled step to the first token.
func (t Timeline) Prefill() time.Duration { return span(t.Scheduled, t.FirstToken) }

// Decode is the time from the first token to the finish.
func (t Timeline) Decode() time.Duration { return span(t.FirstToken, t.Finished) }

// Reasoning is the reasoning tokens' decode: the time from the first
// token (the first reasoning token) to the first answer token; 0 when the
// request has no reasoning or no answer token yet.
func (t Timeline) Reasoning() time.Duration { return span(t.FirstToken, t.FirstAnswer) }

func span(a, b time.Time) time.Duration {
	if a.IsZero() || b.IsZero() {
		return 0
	}
	return b.Sub(a)
}

// Stats is a snapshot of the engine's state and counters.
type Stats struct {
	Running, Waiting int
	// KVUsage is the fraction of KV blocks held by requests (0..1); cached
	// blocks that no request holds count as free, as in vLLM.
	KVUsage float64
	// PrefixQueries and PrefixHits count prompt tokens looked up in and
	// supplied by the prefix cache (vLLM counts tokens too).
	PrefixQueries, PrefixHits int64
	// Preemptions counts preemptions since start.
	Preemptions int64
	// NumBlocks and BlockSize describe the KV cache.
	NumBlocks, BlockSize int
	// Steps counts engine steps; PromptTokens the prompt tokens computed
	// (excluding prefix-cache hits, including recomputation);
	// GenerationTokens the tokens emitted.
	Steps, PromptTokens, GenerationTokens int64
	// PrefixCacheResets counts ResetPrefixCache calls the engine applied.
	PrefixCacheResets int64
}
