package openai

// The answers of the Responses, Messages and Ollama chat APIs, whole and
// as their stream's objects carry them (docs/serve.md, "The APIs").

// Response is a Responses API answer ("object":"response"), whole or as
// response.created / response.completed carry it.
type Response struct {
	ID        string `json:"id"`
	Object    string `json:"object"`
	CreatedAt int64  `json:"created_at"`
	// Status is in_progress, completed or incomplete.
	Status            string             `json:"status"`
	Model             string             `json:"model"`
	Output            []ResponseItem     `json:"output"`
	Usage             *ResponseUsage     `json:"usage"`
	IncompleteDetails *IncompleteDetails `json:"incomplete_details"`
	Error             *Error             `json:"error"`
	Metrics           *RequestMetrics    `json:"metrics,omitempty"`
}

// Statuses of a Response.
const (
	ResponseInProgress = "in_progress"
	ResponseCompleted  = "completed"
	ResponseIncomplete = "incomplete"
)

// IncompleteDetails says why a Response is incomplete
// ("max_output_tokens").
type IncompleteDetails struct {
	Reason string `json:"reason"`
}

// ResponseItem is one output item: a "reasoning" item (its text in
// content as reasoning_text parts, an empty summary) or a "message" (its
// content output_text parts).
type ResponseItem struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Status  string          `json:"status,omitempty"`
	Role    string          `json:"role,omitempty"`
	Summary *[]ResponsePart `json:"summary,omitempty"`
	Content []ResponsePart  `json:"content"`
}

// ResponsePart is one content part: output_text (with its annotations)
// or reasoning_text.
type ResponsePart struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations *[]any `json:"annotations,omitempty"`
}

// ResponseUsage is a Response's token accounting: output_tokens includes
// the reasoning tokens, as completion_tokens does.
type ResponseUsage struct {
	InputTokens         int                 `json:"input_tokens"`
	InputTokensDetails  PromptTokensDetails `json:"input_tokens_details"`
	OutputTokens        int                 `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// Message is a Messages API answer ("type":"message"), whole or as
// message_start carries it.
type Message struct {
	ID           string          `json:"id"`
	Type         string          `json:"type"`
	Role         string          `json:"role"`
	Model        string          `json:"model"`
	Content      []MessageBlock  `json:"content"`
	StopReason   *string         `json:"stop_reason"`
	StopSequence *string         `json:"stop_sequence"`
	Usage        MessagesUsage   `json:"usage"`
	Metrics      *RequestMetrics `json:"metrics,omitempty"`
}

// Stop reasons of a Message.
const (
	StopEndTurn   = "end_turn"
	StopMaxTokens = "max_tokens"
)

// MessageBlock is one content block: "text" or "thinking" (with its
// signature).
type MessageBlock struct {
	Type      string  `json:"type"`
	Text      *string `json:"text,omitempty"`
	Thinking  *string `json:"thinking,omitempty"`
	Signature *string `json:"signature,omitempty"`
}

// MessagesUsage is a Message's token accounting: input_tokens leaves out
// the prompt tokens read from the cache (cache_read_input_tokens);
// output_tokens includes thinking.
type MessagesUsage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	// OutputTokensDetails splits the output: its thinking tokens.
	OutputTokensDetails *ThinkingDetails `json:"output_tokens_details,omitempty"`
}

// ThinkingDetails is how many output tokens were thinking.
type ThinkingDetails struct {
	ThinkingTokens int `json:"thinking_tokens"`
}

// OllamaChatResponse is one object of an Ollama chat answer: every line
// of a stream, the last (done) with the durations (nanoseconds) and
// counts, or the whole answer.
type OllamaChatResponse struct {
	Model              string        `json:"model"`
	CreatedAt          string        `json:"created_at"`
	Message            OllamaMessage `json:"message"`
	Done               bool          `json:"done"`
	DoneReason         string        `json:"done_reason,omitempty"`
	TotalDuration      int64         `json:"total_duration,omitempty"`
	LoadDuration       int64         `json:"load_duration,omitempty"`
	PromptEvalCount    int           `json:"prompt_eval_count,omitempty"`
	PromptEvalDuration int64         `json:"prompt_eval_duration,omitempty"`
	EvalCount          int           `json:"eval_count,omitempty"`
	EvalDuration       int64         `json:"eval_duration,omitempty"`
}
