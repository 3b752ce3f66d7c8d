package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Object names, as the "object" field carries them.
const (
	ObjectChatCompletion      = "chat.completion"
	ObjectChatCompletionChunk = "chat.completion.chunk"
	ObjectTextCompletion      = "text_completion"
	ObjectModel               = "model"
	ObjectList                = "list"
)

// Finish reasons sent in finish_reason.
const (
	FinishStop   = "stop"
	FinishLength = "length"
	FinishAbort  = "abort"
)

// StreamOptions is the request's stream_options object.
type StreamOptions struct {
	// IncludeUsage asks for a final chunk with empty choices and the usage.
	IncludeUsage bool `json:"include_usage"`
	// ContinuousUsageStats (vLLM's extension) puts the running token
	// counts on every chunk.
	ContinuousUsageStats bool `json:"continuous_usage_stats"`
}

// Content is a chat message's content: a string, or an array of parts of
// which only {"type":"text","text":…} are accepted; parts are joined with
// "\n". JSON null is the empty string.
type Content string

// contentPart is one part of an array content.
type contentPart struct {
	Type string  `json:"type"`
	Text *string `json:"text"`
}

// fieldError is a value a field's own decoder (UnmarshalJSON) refuses;
// field is the field's JSON name.
type fieldError struct {
	field, msg string
}

func (e *fieldError) Error() string { return e.msg }

var errContentShape = &fieldError{"content", "content must be a string, null or an array of text parts"}

// UnmarshalJSON accepts a string, null, or an array of text parts.
func (c *Content) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0:
		return errContentShape
	case b[0] == 'n':
		if string(b) != "null" {
			return errContentShape
		}
		*c = ""
		return nil
	case b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*c = Content(s)
		return nil
	case b[0] == '[':
		var parts []contentPart
		if err := json.Unmarshal(b, &parts); err != nil {
			return errContentShape
		}
		var buf bytes.Buffer
		for i, p := range parts {
			if p.Type != "text" || p.Text == nil {
				return &fieldError{"content", fmt.Sprintf("content part %d: only parts of type \"text\" with a text field are supported", i)}
			}
			if i > 0 {
				buf.WriteByte('\n')
			}
			buf.WriteString(*p.Text)
		}
		*c = Content(buf.String())
		return nil
	default:
		return errContentShape
	}
}

// ChatMessage is one message of a chat request or response.
type ChatMessage struct {
	Role    string  `json:"role"`
	Content Content `json:"content"`
	Name    string  `json:"name,omitempty"`
	// Reasoning and ReasoningContent carry a reasoning model's thinking
	// before its answer: vLLM's field ("reasoning", since it followed
	// OpenAI's guidance) and DeepSeek's (and vLLM's former one,
	// "reasoning_content"). A server fills the one it speaks.
	Reasoning        string `json:"reasoning,omitempty"`
	ReasoningContent string `json:"reasoning_content,omitempty"`
}

// Generation holds the request fields both completion endpoints share.
// Sampling fields are accepted and type-checked; the simulated engine does
// not sample, so they do not change the output.
type Generation struct {
	Model         string         `json:"model"`
	MaxTokens     *int64         `json:"max_tokens"`
	N             *int64         `json:"n"`
	Stream        bool           `json:"stream"`
	StreamOptions *StreamOptions `json:"stream_options"`
	Temperature   *float64       `json:"temperature"`
	TopP          *float64       `json:"top_p"`
	Seed          *int64         `json:"seed"`
	Stop          StopField      `json:"stop"`
	User          string         `json:"user"`

	// vLLM's extensions.
	MinTokens *int64 `json:"min_tokens"`
	IgnoreEOS bool   `json:"ignore_eos"`
	Priority  int64  `json:"priority"`

	// ReturnMetrics (tokentrace's extension) asks for the per-request
	// "metrics" object in the usage chunk or the body; the request header
	// X-Return-Metrics: true does the same.
	ReturnMetrics bool `json:"return_metrics"`

	// KVTransferParams (vLLM's) drives disaggregated prefill and decode.
	KVTransferParams *KVTransferParams `json:"kv_transfer_params"`
}

// ChatCompletionRequest is the body of POST /v1/chat/completions.
type ChatCompletionRequest struct {
	Generation
	Messages            []ChatMessage `json:"messages"`
	MaxCompletionTokens *int64        `json:"max_completion_tokens"`
}

// CompletionRequest is the body of POST /v1/completions.
type CompletionRequest struct {
	Generation
	Prompt Prompt `json:"prompt"`
	BestOf *int64 `json:"best_of"`
	Echo   bool   `json:"echo"`
}

// StopField is "stop": a string, an array of strings, or null. The
// simulated engine never emits a stop sequence, so it is only type-checked.
type StopField []string

// UnmarshalJSON accepts a string, an array of strings or null.
func (s *StopField) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var one string
		if err := json.Unmarshal(b, &one); err != nil {
			return err
		}
		*s = StopField{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return &fieldError{"stop", "stop must be a string, an array of strings or null"}
	}
	*s = many
	return nil
}

// Prompt is a completion request's prompt: a string, an array of one
// string, an array of token ids, or an array of one array of token ids.
// Exactly one of Text and Tokens is set after decoding (Tokens non-nil
// when the prompt came as ids); Batch counts the prompts sent, so the
// server can refuse batches.
type Prompt struct {
	Text   string
	Tokens []int32
	Batch  int
	Set    bool
}

// UnmarshalJSON decodes the prompt shapes OpenAI accepts.
func (p *Prompt) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	*p = Prompt{}
	if len(b) == 0 {
		return errPromptShape
	}
	switch b[0] {
	case 'n':
		if string(b) != "null" {
			return errPromptShape
		}
		return nil
	case '"':
		if err := json.Unmarshal(b, &p.Text); err != nil {
			return err
		}
		p.Batch, p.Set = 1, true
		return nil
	case '[':
	default:
		return errPromptShape
	}
	// encoding/json checked the whole body before calling UnmarshalJSON,
	// so the first byte of the first element tells the array's kind; the
	// array is decoded once, into that kind.
	first := bytes.TrimLeft(b[1:], " \t\r\n")
	if len(first) == 0 {
		return errPromptShape
	}
	p.Set = true
	switch first[0] {
	case ']':
		return nil // an empty array: Batch 0
	case '"':
		var ss []string
		if err := json.Unmarshal(b, &ss); err != nil {
			return errPromptShape
		}
		p.Batch, p.Text = len(ss), ss[0]
	case '[':
		var ids [][]int32
		if err := json.Unmarshal(b, &ids); err != nil {
			return errPromptIDs
		}
		p.Batch, p.Tokens = len(ids), ids[0]
		if p.Tokens == nil {
			p.Tokens = []int32{}
		}
	default:
		ids := []int32{}
		if err := json.Unmarshal(b, &ids); err != nil {
			return errPromptIDs
		}
		p.Batch, p.Tokens = 1, ids
	}
	return nil
}

var (
	errPromptShape = &fieldError{"prompt", "prompt must be a string, an array of strings, or an array of token ids"}
	errPromptIDs   = &fieldError{"prompt", "prompt token ids must be integers in the int32 range"}
)

// Usage is the token accounting of a response.
type Usage struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	PromptTokensDetails *PromptTokensDetails `json:"prompt_tokens_details,omitempty"`
	// CompletionTokensDetails splits the completion tokens; set when some
	// were reasoning.
	CompletionTokensDetails *CompletionTokensDetails `json:"completion_tokens_details,omitempty"`
}

// CompletionTokensDetails splits the completion tokens.
type CompletionTokensDetails struct {
	// ReasoningTokens is how many completion tokens were reasoning.
	ReasoningTokens int `json:"reasoning_tokens"`
}

// Reasoning fields of a chat delta or message (ChatMessage).
const (
	ReasoningField        = "reasoning"         // vLLM's (and OpenAI's guidance)
	ReasoningContentField = "reasoning_content" // DeepSeek's, vLLM's former
)

// PromptTokensDetails splits the prompt tokens.
type PromptTokensDetails struct {
	// CachedTokens is how many prompt tokens the prefix cache supplied.
	CachedTokens int `json:"cached_tokens"`
}

// RequestMetrics is the per-request timing object (docs/metrics.md,
// "Server-side timing of one request"), sent as "metrics" when asked.
// Durations are milliseconds; instants are measured on the server.
type RequestMetrics struct {
	// ArrivalTime is when the server began reading the request, Unix
	// seconds.
	ArrivalTime float64 `json:"arrival_time"`
	// FrontendTimeMs: arrival → handed to the engine (read, parse,
	// validate, tokenize).
	FrontendTimeMs float64 `json:"frontend_time_ms"`
	// QueueTimeMs: handed to the engine → first step that computed part of
	// its prompt.
	QueueTimeMs float64 `json:"queue_time_ms"`
	// PrefillTimeMs: that step's start → first output token exists.
	PrefillTimeMs float64 `json:"prefill_time_ms"`
	// TimeToFirstTokenMs: arrival → first output token exists
	// (frontend + queue + prefill).
	TimeToFirstTokenMs float64 `json:"time_to_first_token_ms"`
	// GenerationTimeMs: first → last output token (decode).
	GenerationTimeMs float64 `json:"generation_time_ms"`
	// E2ETimeMs: arrival → last output token.
	E2ETimeMs float64 `json:"e2e_time_ms"`
	// MeanITLMs: GenerationTimeMs / (completion tokens − 1); 0 below 2.
	MeanITLMs float64 `json:"mean_itl_ms"`
	// FaultDelayMs: delay injected by fault injection (slow first token,
	// stalls) before the last chunk was written.
	FaultDelayMs float64 `json:"fault_delay_ms"`

	PromptTokens     int `json:"prompt_tokens"`
	CachedTokens     int `json:"cached_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	PrefillChunks    int `json:"prefill_chunks"`
	Preemptions      int `json:"preemptions"`
}

// ChatCompletion is a non-streaming chat response.
type ChatCompletion struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Choices []ChatChoice    `json:"choices"`
	Usage   Usage           `json:"usage"`
	Metrics *RequestMetrics `json:"metrics,omitempty"`
	// KVTransferParams is a prefill instance's answer to a prefill request
	// (vLLM's): where the decode side reads the prompt's KV blocks.
	KVTransferParams *KVTransferParams `json:"kv_transfer_params,omitempty"`
}

// ChatChoice is one choice of a ChatCompletion.
type ChatChoice struct {
	Index        int             `json:"index"`
	Message      ChatMessage     `json:"message"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

// Completion is a non-streaming text completion response.
type Completion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	Usage   Usage              `json:"usage"`
	Metrics *RequestMetrics    `json:"metrics,omitempty"`
	// KVTransferParams: as Completion's.
	KVTransferParams *KVTransferParams `json:"kv_transfer_params,omitempty"`
}

// CompletionChoice is one choice of a Completion or a completion chunk.
type CompletionChoice struct {
	Index        int             `json:"index"`
	Text         string          `json:"text"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

// ChatCompletionChunk is one streamed chat event. The server writes chunks
// with ChunkEncoder; this type documents the shape and reads it back.
type ChatCompletionChunk struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Choices []ChunkChoice   `json:"choices"`
	Usage   *Usage          `json:"usage,omitempty"`
	Metrics *RequestMetrics `json:"metrics,omitempty"`
}

// ChunkChoice is one choice of a chat chunk.
type ChunkChoice struct {
	Index        int             `json:"index"`
	Delta        ChunkDelta      `json:"delta"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

// ChunkDelta is the increment a chat chunk carries.
type ChunkDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// CompletionChunk is one streamed text completion event.
type CompletionChunk struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	Usage   *Usage             `json:"usage,omitempty"`
	Metrics *RequestMetrics    `json:"metrics,omitempty"`
}

// Model is one entry of GET /v1/models.
type Model struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	MaxModelLen int    `json:"max_model_len,omitempty"`
}

// ModelList is the body of GET /v1/models.
type ModelList struct {
	Object string  `json:"object"`
	Data   []Model `json:"data"`
}
