package ollamatest_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	aopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	oai "github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
	"github.com/openai/openai-go/responses"

	"github.com/tokentrace/tokentrace/internal/gateway/gatewaytest"
	"github.com/tokentrace/tokentrace/internal/ollamatest"
	"github.com/tokentrace/tokentrace/internal/scrape"
)

// clientTokens is each call's output limit: the model never samples its
// end token, so every answer runs to it.
const clientTokens = 12

// TestGoClientsThroughTheGateway drives Ollama, directly and with the
// gateway in front, with openai-go (chat, streamed, and Responses, whole
// and streamed) and the Anthropic Go SDK (Messages, whole and streamed):
// every call succeeds, its deltas add up to the text the SDK assembles,
// and its usage counts the prompt and clientTokens answer tokens. Through
// the gateway every call is measured: counted a 200 and, streamed, given
// a first answer time.
func TestGoClientsThroughTheGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ollama")
	}
	s := ollamatest.Start(t, ollamatest.Options{Parallel: 2})
	gw, _ := gatewaytest.Start(t, gatewaytest.OnePool(s.URL, ""))
	for _, hop := range []struct{ name, base string }{{"ollama", s.URL}, {"gateway", gw}} {
		t.Run(hop.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			openaiChat(ctx, t, hop.base, s.Model)
			openaiResponses(ctx, t, hop.base, s.Model)
			anthropicMessages(ctx, t, hop.base, s.Model)
		})
	}
	// One chat, two Responses and two Messages calls; three of them
	// streamed.
	m := gatewayMetrics(t, gw)
	if n, _ := m.Sum("tokentrace_gateway_requests_total"); n != 5 {
		t.Errorf("the gateway counted %v requests, want 5", n)
	}
	if n, _, _ := m.Histogram("tokentrace_gateway_time_to_first_answer_seconds"); n != 3 {
		t.Errorf("the gateway observed %d first answers, want one per stream (3)", n)
	}
}

// openaiChat streams a chat completion with openai-go.
func openaiChat(ctx context.Context, t *testing.T, base, model string) {
	t.Helper()
	c := oai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	stream := c.Chat.Completions.NewStreaming(ctx, oai.ChatCompletionNewParams{
		Model:         model,
		Messages:      []oai.ChatCompletionMessageParamUnion{oai.SystemMessage("You are terse."), oai.UserMessage("Hi!")},
		MaxTokens:     oai.Int(clientTokens),
		StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)},
	})
	var acc oai.ChatCompletionAccumulator
	streamed := ""
	for stream.Next() {
		chunk := stream.Current()
		acc.AddChunk(chunk)
		if len(chunk.Choices) > 0 {
			streamed += chunk.Choices[0].Delta.Content
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("chat stream: %v", err)
	}
	if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != streamed || streamed == "" {
		t.Errorf("chat: deltas %q, assembled %+v", streamed, acc.Choices)
	}
	checkUsage(t, "chat", acc.Usage.PromptTokens, acc.Usage.CompletionTokens)
}

// openaiResponses calls the Responses API with openai-go, whole and
// streamed.
func openaiResponses(ctx context.Context, t *testing.T, base, model string) {
	t.Helper()
	c := oai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	params := responses.ResponseNewParams{Model: model, Instructions: oai.String("You are terse."),
		Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("Hi!")}, MaxOutputTokens: oai.Int(clientTokens)}
	r, err := c.Responses.New(ctx, params)
	if err != nil {
		t.Fatalf("responses: %v", err)
	}
	if r.OutputText() == "" {
		t.Errorf("responses: no output text in %s", r.RawJSON())
	}
	checkUsage(t, "responses", r.Usage.InputTokens, r.Usage.OutputTokens)
	stream := c.Responses.NewStreaming(ctx, params)
	streamed, final := "", ""
	var usage responses.ResponseUsage
	for stream.Next() {
		switch ev := stream.Current(); ev.Type {
		case "response.output_text.delta":
			streamed += ev.Delta.OfString
		case "response.completed":
			final, usage = ev.Response.OutputText(), ev.Response.Usage
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("responses stream: %v", err)
	}
	if streamed == "" || streamed != final {
		t.Errorf("responses stream: deltas %q, completed text %q", streamed, final)
	}
	checkUsage(t, "responses stream", usage.InputTokens, usage.OutputTokens)
}

// anthropicMessages calls the Messages API with the Anthropic Go SDK,
// whole and streamed.
func anthropicMessages(ctx context.Context, t *testing.T, base, model string) {
	t.Helper()
	c := anthropic.NewClient(aopt.WithBaseURL(base+"/"), aopt.WithAPIKey("unused"), aopt.WithMaxRetries(0))
	params := anthropic.MessageNewParams{Model: model, MaxTokens: clientTokens, System: []anthropic.TextBlockParam{{Text: "You are terse."}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hi!"))}}
	m, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatalf("messages: %v", err)
	}
	if text(m) == "" || m.StopReason != anthropic.StopReasonMaxTokens {
		t.Errorf("messages: %s", m.RawJSON())
	}
	checkUsage(t, "messages", m.Usage.InputTokens, m.Usage.OutputTokens)
	stream := c.Messages.NewStreaming(ctx, params)
	var acc anthropic.Message
	streamed := ""
	for stream.Next() {
		ev := stream.Current()
		if err := acc.Accumulate(ev); err != nil {
			t.Fatalf("messages stream: %v", err)
		}
		if d, ok := ev.AsAny().(anthropic.ContentBlockDeltaEvent); ok {
			streamed += d.Delta.Text
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("messages stream: %v", err)
	}
	if streamed == "" || streamed != text(&acc) {
		t.Errorf("messages stream: deltas %q, assembled %q", streamed, text(&acc))
	}
	checkUsage(t, "messages stream", acc.Usage.InputTokens, acc.Usage.OutputTokens)
}

// text is a message's text blocks, joined.
func text(m *anthropic.Message) string {
	var b strings.Builder
	for _, c := range m.Content {
		if c.Type == "text" {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// checkUsage holds a call's usage: some prompt tokens (the template's
// and the two messages'), clientTokens answer tokens.
func checkUsage(t *testing.T, call string, input, output int64) {
	t.Helper()
	if input <= 0 || output != clientTokens {
		t.Errorf("%s: usage %d input, %d output tokens; want some and %d", call, input, output, clientTokens)
	}
}

// gatewayMetrics reads the gateway's /metrics.
func gatewayMetrics(t *testing.T, gw string) scrape.Families {
	t.Helper()
	f, err := scrape.Get(context.Background(), http.DefaultClient, gw+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
