package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
)

// APIError is a rejected request: the HTTP status to answer with and the
// OpenAI error body.
type APIError struct {
	Status int
	Err    Error
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Err.Type, e.Err.Message)
}

// Write sends e as the response (Retry-After of retryAfter seconds when
// positive).
func (e *APIError) Write(w http.ResponseWriter, retryAfter int) {
	WriteError(w, e.Status, e.Err, retryAfter)
}

// BadRequest returns a 400 invalid_request_error about param.
func BadRequest(param, format string, args ...any) *APIError {
	return &APIError{Status: http.StatusBadRequest, Err: NewError(TypeInvalidRequest, fmt.Sprintf(format, args...), param, "")}
}

// MaxTokensLimit bounds max_tokens and min_tokens before the server
// compares them with the model's context length: larger values are
// rejected as absurd.
const MaxTokensLimit = 1 << 30

// Params are the generation parameters both endpoints share, validated and
// normalized by Params methods.
type Params struct {
	Model string
	// MaxTokens is the requested cap on output tokens; 0 when the request
	// set none (the server then uses max_model_len − prompt).
	MaxTokens int
	MinTokens int
	IgnoreEOS bool
	Priority  int
	Stream    bool
	// IncludeUsage: send a final usage chunk. ContinuousUsage: token
	// counts on every chunk (as vLLM, only with IncludeUsage). Both only
	// when streaming.
	IncludeUsage, ContinuousUsage bool
	// ReturnMetrics asks for the per-request metrics object.
	ReturnMetrics bool
	// KVTransfer is the request's kv_transfer_params (nil when absent or
	// null).
	KVTransfer *KVTransferParams
}

// DecodeChat parses and validates a chat completion request body.
func DecodeChat(body []byte) (*ChatCompletionRequest, *APIError) {
	var r ChatCompletionRequest
	if err := unmarshal(body, &r, chatShape); err != nil {
		return nil, err
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	if len(r.Messages) == 0 {
		return nil, BadRequest("messages", "messages must be a non-empty array of messages")
	}
	for i, m := range r.Messages {
		switch m.Role {
		case "system", "user", "assistant", "tool", "developer", "function":
		case "":
			return nil, BadRequest(fmt.Sprintf("messages[%d].role", i), "messages[%d] has no role", i)
		default:
			return nil, BadRequest(fmt.Sprintf("messages[%d].role", i), "messages[%d] has an unknown role %q (want system, user, assistant, tool or developer)", i, m.Role)
		}
	}
	if err := checkMax("max_completion_tokens", r.MaxCompletionTokens); err != nil {
		return nil, err
	}
	if err := checkMinMax(r.Params()); err != nil {
		return nil, err
	}
	return &r, nil
}

// Params returns the request's generation parameters;
// max_completion_tokens wins over max_tokens when both are set.
func (r *ChatCompletionRequest) Params() Params {
	p := r.params(0)
	if r.MaxCompletionTokens != nil {
		p.MaxTokens = int(*r.MaxCompletionTokens)
	}
	return p
}

// DecodeCompletion parses and validates a text completion request body.
func DecodeCompletion(body []byte) (*CompletionRequest, *APIError) {
	var r CompletionRequest
	if err := unmarshal(body, &r, completionShape); err != nil {
		return nil, err
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	switch {
	case !r.Prompt.Set:
		return nil, BadRequest("prompt", "you must provide a prompt")
	case r.Prompt.Batch == 0:
		return nil, BadRequest("prompt", "prompt must not be an empty array")
	case r.Prompt.Batch > 1:
		return nil, BadRequest("prompt", "batched prompts (%d) are not supported; send one prompt per request", r.Prompt.Batch)
	case r.Prompt.Tokens != nil && len(r.Prompt.Tokens) == 0, r.Prompt.Tokens == nil && r.Prompt.Text == "":
		return nil, BadRequest("prompt", "prompt must not be empty")
	}
	for i, id := range r.Prompt.Tokens {
		if id < 0 {
			return nil, BadRequest("prompt", "prompt token id %d at position %d is negative", id, i)
		}
	}
	if r.BestOf != nil && *r.BestOf != 1 {
		return nil, BadRequest("best_of", "best_of other than 1 is not supported")
	}
	if r.Echo {
		return nil, BadRequest("echo", "echo is not supported")
	}
	if err := checkMinMax(r.Params()); err != nil {
		return nil, err
	}
	return &r, nil
}

// Params returns the request's generation parameters. Like OpenAI's
// completions endpoint, an absent max_tokens means 16.
func (r *CompletionRequest) Params() Params { return r.params(16) }

// params returns the shared generation parameters; defaultMax applies when
// max_tokens is absent (0: the server decides).
func (g *Generation) params(defaultMax int) Params {
	p := Params{
		Model: g.Model, MaxTokens: defaultMax, IgnoreEOS: g.IgnoreEOS, Priority: int(g.Priority), Stream: g.Stream,
		ReturnMetrics: g.ReturnMetrics, KVTransfer: g.KVTransferParams,
	}
	if g.MaxTokens != nil {
		p.MaxTokens = int(*g.MaxTokens)
	}
	if g.MinTokens != nil {
		p.MinTokens = int(*g.MinTokens)
	}
	if g.Stream && g.StreamOptions != nil {
		p.IncludeUsage = g.StreamOptions.IncludeUsage
		// As vLLM: continuous stats only together with include_usage.
		p.ContinuousUsage = g.StreamOptions.IncludeUsage && g.StreamOptions.ContinuousUsageStats
	}
	return p
}

// check validates the shared fields.
func (g *Generation) check() *APIError {
	if g.Model == "" {
		return BadRequest("model", "you must provide a model parameter")
	}
	if g.N != nil {
		if *g.N < 1 {
			return BadRequest("n", "n must be at least 1, got %d", *g.N)
		}
		if *g.N > 1 {
			return BadRequest("n", "n > 1 is not supported (got %d)", *g.N)
		}
	}
	if g.StreamOptions != nil && !g.Stream {
		return BadRequest("stream_options", "stream_options is allowed only when stream is true")
	}
	if t := g.Temperature; t != nil && (*t < 0 || *t > 2 || math.IsNaN(*t)) {
		return BadRequest("temperature", "temperature must be between 0 and 2, got %g", *t)
	}
	if p := g.TopP; p != nil && (*p <= 0 || *p > 1 || math.IsNaN(*p)) {
		return BadRequest("top_p", "top_p must be in (0, 1], got %g", *p)
	}
	if m := g.MinTokens; m != nil && (*m < 0 || *m > MaxTokensLimit) {
		return BadRequest("min_tokens", "min_tokens must be between 0 and %d, got %d", MaxTokensLimit, *m)
	}
	if g.Priority < math.MinInt32 || g.Priority > math.MaxInt32 {
		return BadRequest("priority", "priority must fit in 32 bits, got %d", g.Priority)
	}
	return checkMax("max_tokens", g.MaxTokens)
}

func checkMinMax(p Params) *APIError {
	if p.MaxTokens > 0 && p.MinTokens > p.MaxTokens {
		return BadRequest("min_tokens", "min_tokens (%d) must be at most max_tokens (%d)", p.MinTokens, p.MaxTokens)
	}
	return nil
}

func checkMax(name string, v *int64) *APIError {
	if v == nil {
		return nil
	}
	if *v < 1 {
		return BadRequest(name, "%s must be at least 1, got %d", name, *v)
	}
	if *v > MaxTokensLimit {
		return BadRequest(name, "%s = %d is beyond any context length", name, *v)
	}
	return nil
}

// unmarshal checks body's keys against sh (checkKeys: exact keys, no
// duplicates), then decodes it into v, turning errors into 400s that name
// the offending field.
func unmarshal(body []byte, v any, sh *shape) *APIError {
	if len(bytes.TrimSpace(body)) == 0 {
		return BadRequest("", "request body is empty; expected a JSON object")
	}
	scanErr := checkKeys(body, sh)
	var ke *keyError
	if errors.As(scanErr, &ke) {
		return BadRequest(ke.param, "%s", ke.msg)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return decodeError(body, err)
	}
	if scanErr != nil {
		// encoding/json took what the key scan refused (nesting deeper
		// than jsonscan's limit): the keys past it were not checked.
		return BadRequest("", "request body is not accepted: %v", scanErr)
	}
	return nil
}

// decodeError turns an encoding/json error into a 400 naming the field
// where it can.
func decodeError(body []byte, err error) *APIError {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var fe *fieldError
	switch {
	case errors.As(err, &syn):
		return BadRequest("", "request body is not valid JSON: %v (at byte %d)", syn, syn.Offset)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return BadRequest("", "request body must be a JSON object, got %s", typ.Value)
		}
		// encoding/json names a promoted field by its embedded struct's Go
		// name too; clients know only the JSON name.
		field := messagePath(body, strings.TrimPrefix(typ.Field, "Generation."))
		return BadRequest(field, "field %s: expected %s, got %s", field, typeName(typ.Type.Kind().String()), typ.Value)
	case errors.As(err, &fe):
		field := fe.field
		if field == "content" {
			field = messagePath(body, "messages.content")
		}
		return BadRequest(field, "%s", fe.msg)
	default:
		return BadRequest("", "invalid request body: %v", err)
	}
}

// messagePath turns "messages.FIELD", as encoding/json names a field of a
// message, into "messages[i].FIELD" with the index of the first message
// that does not decode. Other fields are returned as they are.
func messagePath(body []byte, field string) string {
	rest, ok := strings.CutPrefix(field, "messages.")
	if !ok {
		return field
	}
	var probe struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if json.Unmarshal(body, &probe) != nil {
		return field
	}
	for i, m := range probe.Messages {
		var cm ChatMessage
		if json.Unmarshal(m, &cm) != nil {
			return fmt.Sprintf("messages[%d].%s", i, rest)
		}
	}
	return field
}

func typeName(kind string) string {
	switch kind {
	case "int", "int32", "int64":
		return "an integer"
	case "float64":
		return "a number"
	case "bool":
		return "a boolean"
	case "string":
		return "a string"
	case "slice":
		return "an array"
	case "struct", "ptr":
		return "an object"
	}
	return kind
}
