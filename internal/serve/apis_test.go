package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	aopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	oai "github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
	"github.com/openai/openai-go/responses"

	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// reasoningConfig is testConfig with a reasoning phase of think tokens.
func reasoningConfig(think int) Config {
	cfg := testConfig(time.Millisecond)
	cfg.Engine.Reasoning = workload.Fixed(think)
	return cfg
}

// TestResponsesClient drives /v1/responses with openai-go's Responses
// client: whole and streamed, the reasoning phase as a reasoning item.
func TestResponsesClient(t *testing.T) {
	s := startServer(t, reasoningConfig(3))
	client := oai.NewClient(option.WithBaseURL(s.URL()+"/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx := context.Background()
	params := responses.ResponseNewParams{
		Model:           testModel,
		Instructions:    oai.String("You are terse."),
		Input:           responses.ResponseNewParamsInputUnion{OfString: oai.String("Hi!")},
		MaxOutputTokens: oai.Int(8),
	}

	t.Run("whole", func(t *testing.T) {
		r, err := client.Responses.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != "incomplete" || r.IncompleteDetails.Reason != "max_output_tokens" {
			t.Errorf("status %q, incomplete %+v", r.Status, r.IncompleteDetails)
		}
		if n := tokenizer.Count(r.OutputText()); n != 5 {
			t.Errorf("output text %q is %d tokens, want 5", r.OutputText(), n)
		}
		if len(r.Output) != 2 || r.Output[0].Type != "reasoning" || r.Output[1].Type != "message" {
			t.Errorf("output items %+v", r.Output)
		}
		u := r.Usage
		if u.OutputTokens != 8 || u.OutputTokensDetails.ReasoningTokens != 3 || u.InputTokens != 8 || u.TotalTokens != 16 {
			t.Errorf("usage %+v", u)
		}
	})

	t.Run("streamed", func(t *testing.T) {
		stream := client.Responses.NewStreaming(ctx, params)
		var text, reasoning string
		var order []string
		var final responses.Response
		parts := map[[2]int64]string{} // each content part added, by output and content index
		for stream.Next() {
			ev := stream.Current()
			at := [2]int64{ev.OutputIndex, ev.ContentIndex}
			switch ev.Type {
			case "response.content_part.added":
				parts[at] = ev.Part.Type
			case "response.output_text.delta":
				text += ev.Delta.OfString
				order = append(order, "text")
			case "response.reasoning_text.delta":
				reasoning += ev.Delta.OfString
				order = append(order, "reasoning")
			}
			if want, ok := map[string]string{"response.output_text.delta": "output_text", "response.reasoning_text.delta": "reasoning_text"}[ev.Type]; ok && parts[at] != want {
				t.Errorf("%s at output %d, content %d before its %s part was added (part %q)", ev.Type, at[0], at[1], want, parts[at])
			}
			switch ev.Type {
			case "response.completed", "response.incomplete":
				final = ev.Response
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if tokenizer.Count(text) != 5 || tokenizer.Count(reasoning) != 3 {
			t.Errorf("text %q, reasoning %q", text, reasoning)
		}
		if len(order) == 0 || order[0] != "reasoning" || order[len(order)-1] != "text" {
			t.Errorf("deltas in order %v: reasoning must come first", order)
		}
		if final.Usage.OutputTokens != 8 || final.OutputText() != text {
			t.Errorf("final response usage %+v, text %q", final.Usage, final.OutputText())
		}
	})

	t.Run("error", func(t *testing.T) {
		p := params
		p.Model = "no-such-model"
		_, err := client.Responses.New(ctx, p)
		var apiErr *oai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" {
			t.Fatalf("error %v", err)
		}
	})
}

// TestMessagesClient drives /v1/messages with the Anthropic Go SDK:
// whole and streamed (its accumulator), the reasoning phase as a
// thinking block, and an error in Anthropic's shape.
func TestMessagesClient(t *testing.T) {
	s := startServer(t, reasoningConfig(2))
	base := strings.TrimSuffix(s.URL(), "/v1") + "/"
	client := anthropic.NewClient(aopt.WithBaseURL(base), aopt.WithAPIKey("unused"), aopt.WithMaxRetries(0))
	ctx := context.Background()
	params := anthropic.MessageNewParams{
		Model:     testModel,
		MaxTokens: 7,
		System:    []anthropic.TextBlockParam{{Text: "You are terse."}},
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hi!"))},
	}
	check := func(t *testing.T, m *anthropic.Message) {
		t.Helper()
		if len(m.Content) != 2 || m.Content[0].Type != "thinking" || m.Content[1].Type != "text" {
			t.Fatalf("content %+v", m.Content)
		}
		if tokenizer.Count(m.Content[0].Thinking) != 2 || tokenizer.Count(m.Content[1].Text) != 5 {
			t.Errorf("thinking %q, text %q", m.Content[0].Thinking, m.Content[1].Text)
		}
		if m.StopReason != "max_tokens" || m.Usage.OutputTokens != 7 || m.Usage.OutputTokensDetails.ThinkingTokens != 2 {
			t.Errorf("stop %q, usage %+v", m.StopReason, m.Usage)
		}
		if m.Usage.InputTokens+m.Usage.CacheReadInputTokens != 8 {
			t.Errorf("input %d + cached %d, want 8 prompt tokens", m.Usage.InputTokens, m.Usage.CacheReadInputTokens)
		}
	}

	t.Run("whole", func(t *testing.T) {
		m, err := client.Messages.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		check(t, m)
	})

	t.Run("streamed", func(t *testing.T) {
		stream := client.Messages.NewStreaming(ctx, params)
		var m anthropic.Message
		for stream.Next() {
			if err := m.Accumulate(stream.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		check(t, &m)
	})

	t.Run("error", func(t *testing.T) {
		p := params
		p.Model = "no-such-model"
		_, err := client.Messages.New(ctx, p)
		var apiErr *anthropic.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
			t.Fatalf("error %v", err)
		}
		if !strings.Contains(apiErr.RawJSON(), `"type":"not_found_error"`) {
			t.Errorf("error body %s", apiErr.RawJSON())
		}
	})
}

// TestOllamaChat reads /api/chat's NDJSON stream and whole answer as
// Ollama's clients do: thinking then content, and a last object with the
// engine's durations.
func TestOllamaChat(t *testing.T) {
	s := startServer(t, reasoningConfig(2))
	url := strings.TrimSuffix(s.URL(), "/v1") + "/api/chat"
	ctx := context.Background()
	body := `{"model":"` + testModel + `","messages":[{"role":"user","content":"Hi!"}],"options":{"num_predict":6}`
	for _, stream := range []bool{true, false} {
		b := body + `}`
		if !stream {
			b = body + `,"stream":false}`
		}
		resp := post(t, ctx, url, b)
		var objs []openai.OllamaChatResponse
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var o openai.OllamaChatResponse
			if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			objs = append(objs, o)
		}
		_ = resp.Body.Close()
		if stream && resp.Header.Get("Content-Type") != "application/x-ndjson" {
			t.Errorf("content type %q", resp.Header.Get("Content-Type"))
		}
		var thinking, content string
		for _, o := range objs {
			thinking += o.Message.Thinking
			content += o.Message.Content
		}
		last := objs[len(objs)-1]
		if !last.Done || last.DoneReason != "length" || last.EvalCount != 6 || last.PromptEvalCount != 3 {
			t.Errorf("stream %v: last object %+v", stream, last)
		}
		if last.EvalDuration <= 0 || last.PromptEvalDuration <= 0 || last.TotalDuration < last.EvalDuration+last.PromptEvalDuration {
			t.Errorf("stream %v: durations %+v", stream, last)
		}
		if tokenizer.Count(thinking) != 2 || tokenizer.Count(content) != 4 {
			t.Errorf("stream %v: thinking %q, content %q", stream, thinking, content)
		}
	}
	resp := post(t, ctx, url, `{"model":"other","messages":[{"role":"user","content":"x"}]}`)
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.HasPrefix(string(b), `{"error":"`) {
		t.Errorf("unknown model: %d %s", resp.StatusCode, b)
	}
}

// TestAPIsRefuseBadInput sends each API bad and hostile bodies — case
// variants and duplicates of its keys, 10,000-deep nesting, a body over
// max_body_bytes, a body that is no object — and every one is a 4xx in
// the API's own error shape, naming what is wrong.
func TestAPIsRefuseBadInput(t *testing.T) {
	cfg := testConfig(time.Millisecond)
	cfg.MaxBodyBytes = 32 << 10
	s := startServer(t, cfg)
	root := strings.TrimSuffix(s.URL(), "/v1")
	huge := `{"model":"` + testModel + `","input":"` + strings.Repeat("a", 40<<10) + `"}`
	hugeMessage := `[{"role":"user","content":"` + strings.Repeat("a", 40<<10) + `"}]`
	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000) // within the body limit: nesting, not size
	cases := []struct {
		api    openai.API
		body   string
		status int
		want   string
	}{
		{openai.APIResponses, `{"model":"sim-model","input":"x","Max_Output_Tokens":3}`, 400, "Unrecognized request argument supplied: Max_Output_Tokens"},
		{openai.APIResponses, `{"model":"sim-model","input":"x","input":"y"}`, 400, "duplicate key"},
		{openai.APIResponses, `{"model":"sim-model","input":[{"type":"function_call_output","role":"user"}]}`, 400, "only message items"},
		{openai.APIResponses, `{"model":"sim-model","input":"x","max_output_tokens":0}`, 400, "max_output_tokens must be at least 1"},
		{openai.APIResponses, `{"model":"sim-model","input":"x","previous_response_id":"resp_1"}`, 400, "not stored"},
		{openai.APIResponses, huge, 413, "larger than the limit"},
		{openai.APIResponses, `[1,2]`, 400, "JSON object"},
		{openai.APIResponses, `{"model":"sim-model","input":` + deep + `}`, 400, "exceeded max depth"},
		{openai.APIMessages, `{"model":"sim-model","messages":[{"role":"user","content":"x"}]}`, 400, "max_tokens: Field required"},
		{openai.APIMessages, `{"model":"sim-model","max_tokens":4,"messages":[{"role":"system","content":"x"}]}`, 400, "must be user or assistant"},
		{openai.APIMessages, `{"model":"sim-model","max_tokens":4,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`, 400, "only text parts"},
		{openai.APIMessages, `{"model":"sim-model","max_tokens":4,"MAX_TOKENS":9,"messages":[{"role":"user","content":"x"}]}`, 400, "Unrecognized request argument"},
		{openai.APIMessages, `{"model":"sim-model","max_tokens":4,"temperature":1.5,"messages":[{"role":"user","content":"x"}]}`, 400, "temperature"},
		{openai.APIMessages, `{"model":"nope","max_tokens":4,"messages":[{"role":"user","content":"x"}]}`, 404, "does not exist"},
		{openai.APIMessages, `{"model":"sim-model","max_tokens":4,"messages":` + hugeMessage + `}`, 413, "larger than the limit"},
		{openai.APIMessages, `{"model":"sim-model","max_tokens":4,"messages":` + deep + `}`, 400, "exceeded max depth"},
		{openai.APIMessages, `"x"`, 400, "JSON object"},
		{openai.APIOllama, `{"model":"sim-model","messages":[{"role":"user","content":"x"}],"options":{"num_predict":"many"}}`, 400, "num_predict"},
		{openai.APIOllama, `{"model":"sim-model","messages":[]}`, 400, "non-empty"},
		{openai.APIOllama, `{"model":"sim-model","messages":[{"role":"user","content":"x","content":"y"}]}`, 400, "duplicate key"},
		{openai.APIOllama, `{"model":"sim-model","messages":[{"role":"user","content":"x"}],"options":{"num_predict":1e12}}`, 400, "num_predict"},
		{openai.APIOllama, `{"model":"sim-model","messages":` + hugeMessage + `}`, 413, "larger than the limit"},
		{openai.APIOllama, `{"model":"sim-model","messages":` + deep + `}`, 400, "exceeded max depth"},
		{openai.APIOllama, `{"model":"sim-model","messages":[{"role":"user","content":"x"}],"options":{"num_predict":1,"num_predict":2}}`, 400, "duplicate key"},
	}
	for _, c := range cases {
		resp := post(t, context.Background(), root+c.api.Path(), c.body)
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(b), c.want) {
			t.Errorf("%s %.60s: %d %s, want %d and %q", c.api, c.body, resp.StatusCode, b, c.status, c.want)
			continue
		}
		var shape map[string]json.RawMessage
		if err := json.Unmarshal(b, &shape); err != nil {
			t.Fatal(err)
		}
		switch c.api {
		case openai.APIMessages:
			if string(shape["type"]) != `"error"` || !strings.Contains(string(shape["error"]), `"message"`) {
				t.Errorf("messages error shape %s", b)
			}
		case openai.APIOllama:
			if len(shape) != 1 || !strings.HasPrefix(string(shape["error"]), `"`) {
				t.Errorf("ollama error shape %s", b)
			}
		default:
			if !strings.Contains(string(shape["error"]), `"type"`) {
				t.Errorf("openai error shape %s", b)
			}
		}
	}
}
