package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
)

// The request bodies of the Responses, Messages and Ollama chat APIs.
// As for chat and completions, keys are exact (checkKeys), fields that
// do not change the simulated output are type-checked and accepted, and
// unknown keys are ignored.

// ResponsesRequest is the body of POST /v1/responses.
type ResponsesRequest struct {
	Model           string          `json:"model"`
	Input           ResponsesInput  `json:"input"`
	Instructions    *string         `json:"instructions"`
	MaxOutputTokens *int64          `json:"max_output_tokens"`
	Stream          bool            `json:"stream"`
	Temperature     *float64        `json:"temperature"`
	TopP            *float64        `json:"top_p"`
	Store           *bool           `json:"store"`
	User            string          `json:"user"`
	Reasoning       *ReasoningParam `json:"reasoning"`
	// PreviousResponseID is refused when set: responses are not stored.
	PreviousResponseID *string `json:"previous_response_id"`
	ReturnMetrics      bool    `json:"return_metrics"`
	// vLLM's extensions, as on chat.
	IgnoreEOS bool   `json:"ignore_eos"`
	MinTokens *int64 `json:"min_tokens"`
}

// ReasoningParam is a Responses request's "reasoning" object.
type ReasoningParam struct {
	Effort  *string `json:"effort"`
	Summary *string `json:"summary"`
}

// ResponsesInput is "input": a string (one user message) or an array of
// message items.
type ResponsesInput []ChatMessage

// inputItem is one item of an array input: a message (type "message" or
// absent) whose content is a string or input_text / output_text parts.
type inputItem struct {
	Type    string    `json:"type"`
	Role    string    `json:"role"`
	Content textParts `json:"content"`
}

// textParts is content given as a string or an array of text parts
// {"type":…,"text":…} of the types the API allows (joined with "\n").
type textParts struct {
	text  string
	parts bool // given as an array
	raw   []byte
}

// part is one text part (Responses' input_text / output_text,
// Anthropic's text block).
type part struct {
	Type string  `json:"type"`
	Text *string `json:"text"`
}

// UnmarshalJSON keeps the raw value: the caller knows the part types its
// API allows (textParts.decode).
func (t *textParts) UnmarshalJSON(b []byte) error {
	t.raw = append(t.raw[:0], b...)
	return nil
}

// decode reads the raw value as a string or an array of parts of the
// given kinds; field names it in an error.
func (t *textParts) decode(field string, kinds ...string) *APIError {
	b := bytes.TrimSpace(t.raw)
	want := fmt.Sprintf("%s must be a string or an array of %s parts", field, strings.Join(kinds, " / "))
	switch {
	case len(b) == 0:
		return BadRequest(field, "%s is required", field)
	case b[0] == '"':
		if err := json.Unmarshal(b, &t.text); err != nil {
			return BadRequest(field, "%s", want)
		}
		return nil
	case b[0] != '[':
		return BadRequest(field, "%s", want)
	}
	var ps []part
	if err := json.Unmarshal(b, &ps); err != nil {
		return BadRequest(field, "%s", want)
	}
	t.parts = true
	var buf strings.Builder
	for i, p := range ps {
		ok := false
		for _, k := range kinds {
			ok = ok || p.Type == k
		}
		if !ok || p.Text == nil {
			return BadRequest(fmt.Sprintf("%s[%d]", field, i), "%s[%d]: only %s parts with a text are supported, got type %q", field, i, strings.Join(kinds, " / "), p.Type)
		}
		if i > 0 {
			buf.WriteByte('\n')
		}
		buf.WriteString(*p.Text)
	}
	t.text = buf.String()
	return nil
}

// UnmarshalJSON accepts a string or an array of message items.
func (in *ResponsesInput) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*in = ResponsesInput{{Role: "user", Content: Content(s)}}
		return nil
	}
	var items []inputItem
	if err := json.Unmarshal(b, &items); err != nil {
		return &fieldError{"input", "input must be a string or an array of message items"}
	}
	out := make(ResponsesInput, len(items))
	for i, it := range items {
		field := fmt.Sprintf("input[%d]", i)
		if it.Type != "" && it.Type != "message" {
			return &fieldError{field + ".type", fmt.Sprintf("%s: only message items are supported, got type %q", field, it.Type)}
		}
		switch it.Role {
		case "user", "assistant", "system", "developer":
		default:
			return &fieldError{field + ".role", fmt.Sprintf("%s.role must be user, assistant, system or developer, got %q", field, it.Role)}
		}
		if e := it.Content.decode(field+".content", "input_text", "output_text"); e != nil {
			return &fieldError{e.paramOr(field + ".content"), e.Err.Message}
		}
		out[i] = ChatMessage{Role: it.Role, Content: Content(it.Content.text)}
	}
	*in = out
	return nil
}

func (e *APIError) paramOr(def string) string {
	if e.Err.Param != nil {
		return *e.Err.Param
	}
	return def
}

var (
	partShape      = keysOf(reflect.TypeFor[part]())
	inputItemShape = keysOf(reflect.TypeFor[inputItem]()).with("content", partShape)
	responsesShape = keysOf(reflect.TypeFor[ResponsesRequest]()).
			with("input", inputItemShape).with("reasoning", keysOf(reflect.TypeFor[ReasoningParam]()))
)

// DecodeResponses parses and validates a Responses request body.
func DecodeResponses(body []byte) (*ResponsesRequest, *APIError) {
	var r ResponsesRequest
	if err := unmarshal(body, &r, responsesShape); err != nil {
		return nil, err
	}
	switch {
	case r.Model == "":
		return nil, BadRequest("model", "you must provide a model parameter")
	case len(r.Input) == 0:
		return nil, BadRequest("input", "input must be a non-empty string or array of message items")
	case r.PreviousResponseID != nil:
		return nil, BadRequest("previous_response_id", "previous_response_id is not supported: responses are not stored")
	}
	if err := checkSampling(r.Temperature, 2, r.TopP); err != nil {
		return nil, err
	}
	if err := checkMax("max_output_tokens", r.MaxOutputTokens); err != nil {
		return nil, err
	}
	if err := checkMinTokens(r.MinTokens, r.Params()); err != nil {
		return nil, err
	}
	return &r, nil
}

// Messages returns the prompt as chat messages: the instructions as a
// system message, then the input.
func (r *ResponsesRequest) Messages() []ChatMessage {
	if r.Instructions == nil || *r.Instructions == "" {
		return r.Input
	}
	return append([]ChatMessage{{Role: "system", Content: Content(*r.Instructions)}}, r.Input...)
}

// Params returns the generation parameters (max_output_tokens; absent:
// the server decides).
func (r *ResponsesRequest) Params() Params {
	p := Params{Model: r.Model, Stream: r.Stream, ReturnMetrics: r.ReturnMetrics, IgnoreEOS: r.IgnoreEOS}
	if r.MaxOutputTokens != nil {
		p.MaxTokens = int(*r.MaxOutputTokens)
	}
	if r.MinTokens != nil {
		p.MinTokens = int(*r.MinTokens)
	}
	return p
}

// MessagesRequest is the body of POST /v1/messages (Anthropic's Messages
// API).
type MessagesRequest struct {
	Model         string          `json:"model"`
	MaxTokens     *int64          `json:"max_tokens"`
	Messages      []messagesMsg   `json:"messages"`
	System        textParts       `json:"system"`
	Stream        bool            `json:"stream"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int64          `json:"top_k"`
	StopSequences []string        `json:"stop_sequences"`
	Metadata      json.RawMessage `json:"metadata"`
	Thinking      *ThinkingParam  `json:"thinking"`
	ReturnMetrics bool            `json:"return_metrics"`
	// vLLM's extensions, as on chat.
	IgnoreEOS bool   `json:"ignore_eos"`
	MinTokens *int64 `json:"min_tokens"`

	msgs []ChatMessage
}

// ThinkingParam is a Messages request's "thinking" object.
type ThinkingParam struct {
	Type         string `json:"type"`
	BudgetTokens *int64 `json:"budget_tokens"`
}

type messagesMsg struct {
	Role    string    `json:"role"`
	Content textParts `json:"content"`
}

var messagesShape = keysOf(reflect.TypeFor[MessagesRequest]()).
	with("messages", keysOf(reflect.TypeFor[messagesMsg]()).with("content", partShape)).
	with("system", partShape).with("thinking", keysOf(reflect.TypeFor[ThinkingParam]()))

// DecodeMessages parses and validates a Messages request body.
func DecodeMessages(body []byte) (*MessagesRequest, *APIError) {
	var r MessagesRequest
	if err := unmarshal(body, &r, messagesShape); err != nil {
		return nil, err
	}
	switch {
	case r.Model == "":
		return nil, BadRequest("model", "model: Field required")
	case r.MaxTokens == nil:
		return nil, BadRequest("max_tokens", "max_tokens: Field required")
	case len(r.Messages) == 0:
		return nil, BadRequest("messages", "messages: at least one message is required")
	}
	if err := checkMax("max_tokens", r.MaxTokens); err != nil {
		return nil, err
	}
	if err := checkSampling(r.Temperature, 1, r.TopP); err != nil {
		return nil, err
	}
	if r.TopK != nil && *r.TopK < 0 {
		return nil, BadRequest("top_k", "top_k must not be negative, got %d", *r.TopK)
	}
	if t := r.Thinking; t != nil {
		switch t.Type {
		case "enabled", "disabled":
		default:
			return nil, BadRequest("thinking.type", "thinking.type must be enabled or disabled, got %q", t.Type)
		}
		if t.Type == "enabled" && (t.BudgetTokens == nil || *t.BudgetTokens < 1024) {
			return nil, BadRequest("thinking.budget_tokens", "thinking.budget_tokens must be at least 1024")
		}
	}
	if len(bytes.TrimSpace(r.System.raw)) > 0 && string(bytes.TrimSpace(r.System.raw)) != "null" {
		if e := r.System.decode("system", "text"); e != nil {
			return nil, e
		}
		r.msgs = append(r.msgs, ChatMessage{Role: "system", Content: Content(r.System.text)})
	}
	for i := range r.Messages {
		m := &r.Messages[i]
		field := fmt.Sprintf("messages[%d]", i)
		if m.Role != "user" && m.Role != "assistant" {
			return nil, BadRequest(field+".role", "%s.role must be user or assistant, got %q", field, m.Role)
		}
		if e := m.Content.decode(field+".content", "text"); e != nil {
			return nil, e
		}
		r.msgs = append(r.msgs, ChatMessage{Role: m.Role, Content: Content(m.Content.text)})
	}
	if err := checkMinTokens(r.MinTokens, r.Params()); err != nil {
		return nil, err
	}
	return &r, nil
}

// ChatMessages returns the prompt as chat messages: the system prompt,
// then the messages.
func (r *MessagesRequest) ChatMessages() []ChatMessage { return r.msgs }

// Params returns the generation parameters (max_tokens is required).
func (r *MessagesRequest) Params() Params {
	p := Params{Model: r.Model, MaxTokens: int(*r.MaxTokens), Stream: r.Stream, ReturnMetrics: r.ReturnMetrics, IgnoreEOS: r.IgnoreEOS}
	if r.MinTokens != nil {
		p.MinTokens = int(*r.MinTokens)
	}
	return p
}

// OllamaChatRequest is the body of Ollama's POST /api/chat.
type OllamaChatRequest struct {
	Model    string          `json:"model"`
	Messages []OllamaMessage `json:"messages"`
	// Stream is true when absent, as in Ollama.
	Stream    *bool           `json:"stream"`
	Options   *OllamaOptions  `json:"options"`
	Think     json.RawMessage `json:"think"`
	Format    json.RawMessage `json:"format"`
	KeepAlive json.RawMessage `json:"keep_alive"`
}

// OllamaMessage is one message of an Ollama chat.
type OllamaMessage struct {
	Role     string `json:"role"`
	Content  string `json:"content"`
	Thinking string `json:"thinking,omitempty"`
}

// OllamaOptions are the model options of an Ollama request; num_predict
// caps the output (negative: no cap).
type OllamaOptions struct {
	NumPredict  *int64    `json:"num_predict"`
	NumCtx      *int64    `json:"num_ctx"`
	Temperature *float64  `json:"temperature"`
	TopP        *float64  `json:"top_p"`
	TopK        *int64    `json:"top_k"`
	Seed        *int64    `json:"seed"`
	Stop        StopField `json:"stop"`
}

var ollamaShape = keysOf(reflect.TypeFor[OllamaChatRequest]()).
	with("messages", keysOf(reflect.TypeFor[OllamaMessage]())).with("options", keysOf(reflect.TypeFor[OllamaOptions]()))

// DecodeOllamaChat parses and validates an Ollama chat request body.
func DecodeOllamaChat(body []byte) (*OllamaChatRequest, *APIError) {
	var r OllamaChatRequest
	if err := unmarshal(body, &r, ollamaShape); err != nil {
		return nil, err
	}
	if r.Model == "" {
		return nil, BadRequest("model", "model is required")
	}
	if len(r.Messages) == 0 {
		return nil, BadRequest("messages", "messages must be a non-empty array")
	}
	for i, m := range r.Messages {
		switch m.Role {
		case "system", "user", "assistant", "tool":
		default:
			return nil, BadRequest(fmt.Sprintf("messages[%d].role", i), "messages[%d].role must be system, user, assistant or tool, got %q", i, m.Role)
		}
	}
	if o := r.Options; o != nil {
		if n := o.NumPredict; n != nil && *n > MaxTokensLimit {
			return nil, BadRequest("options.num_predict", "options.num_predict = %d is beyond any context length", *n)
		}
		if err := checkSampling(o.Temperature, math.MaxFloat64, o.TopP); err != nil {
			return nil, err
		}
	}
	return &r, nil
}

// ChatMessages returns the messages.
func (r *OllamaChatRequest) ChatMessages() []ChatMessage {
	out := make([]ChatMessage, len(r.Messages))
	for i, m := range r.Messages {
		out[i] = ChatMessage{Role: m.Role, Content: Content(m.Content)}
	}
	return out
}

// Params returns the generation parameters: options.num_predict when
// positive (else the server decides), stream true unless false.
func (r *OllamaChatRequest) Params() Params {
	p := Params{Model: r.Model, Stream: r.Stream == nil || *r.Stream}
	if o := r.Options; o != nil && o.NumPredict != nil && *o.NumPredict > 0 {
		p.MaxTokens = int(*o.NumPredict)
	}
	return p
}

// checkSampling validates a temperature in [0, maxTemp] and a top_p in
// (0, 1].
func checkSampling(t *float64, maxTemp float64, p *float64) *APIError {
	if t != nil && (*t < 0 || *t > maxTemp || math.IsNaN(*t)) {
		return BadRequest("temperature", "temperature must be between 0 and %g, got %g", maxTemp, *t)
	}
	if p != nil && (*p <= 0 || *p > 1 || math.IsNaN(*p)) {
		return BadRequest("top_p", "top_p must be in (0, 1], got %g", *p)
	}
	return nil
}

// checkMinTokens validates min_tokens against the output cap.
func checkMinTokens(m *int64, p Params) *APIError {
	if m != nil && (*m < 0 || *m > MaxTokensLimit) {
		return BadRequest("min_tokens", "min_tokens must be between 0 and %d, got %d", MaxTokensLimit, *m)
	}
	return checkMinMax(p)
}
