package serve

import (
	"context"
	"errors"
	"testing"
	"time"

	oai "github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/tokentrace/tokentrace/internal/tokenizer"
)

// TestOpenAIClient drives the server with the official openai-go client.
func TestOpenAIClient(t *testing.T) {
	s := startServer(t, testConfig(time.Millisecond))
	client := oai.NewClient(option.WithBaseURL(s.URL()+"/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx := context.Background()
	msgs := []oai.ChatCompletionMessageParamUnion{oai.SystemMessage("You are terse."), oai.UserMessage("Hi!")}

	t.Run("chat", func(t *testing.T) {
		c, err := client.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{
			Model: testModel, Messages: msgs, MaxCompletionTokens: oai.Int(6),
		}, option.WithJSONSet("ignore_eos", true))
		if err != nil {
			t.Fatal(err)
		}
		if n := tokenizer.Count(c.Choices[0].Message.Content); n != 6 || c.Choices[0].FinishReason != "length" {
			t.Errorf("content %q (%d tokens), finish %q", c.Choices[0].Message.Content, n, c.Choices[0].FinishReason)
		}
		if c.Usage.PromptTokens != 8 || c.Usage.CompletionTokens != 6 || c.Usage.TotalTokens != 14 {
			t.Errorf("usage %+v", c.Usage)
		}
	})

	t.Run("chat streaming", func(t *testing.T) {
		stream := client.Chat.Completions.NewStreaming(ctx, oai.ChatCompletionNewParams{
			Model: testModel, Messages: msgs, MaxTokens: oai.Int(9),
			StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)},
		}, option.WithJSONSet("ignore_eos", true))
		var acc oai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if n := tokenizer.Count(acc.Choices[0].Message.Content); n != 9 {
			t.Errorf("accumulated content %q is %d tokens, want 9", acc.Choices[0].Message.Content, n)
		}
		if acc.Usage.PromptTokens != 8 || acc.Usage.CompletionTokens != 9 || acc.Usage.TotalTokens != 17 {
			t.Errorf("usage %+v", acc.Usage)
		}
	})

	t.Run("completion streaming", func(t *testing.T) {
		stream := client.Completions.NewStreaming(ctx, oai.CompletionNewParams{
			Model:         testModel,
			Prompt:        oai.CompletionNewParamsPromptUnion{OfString: oai.String("one two three")},
			MaxTokens:     oai.Int(4),
			StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)},
		}, option.WithJSONSet("ignore_eos", true))
		text, completion := "", int64(0)
		for stream.Next() {
			c := stream.Current()
			if len(c.Choices) > 0 {
				text += c.Choices[0].Text
			}
			if c.Usage.TotalTokens > 0 {
				completion = c.Usage.CompletionTokens
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if tokenizer.Count(text) != 4 || completion != 4 {
			t.Errorf("text %q, completion tokens %d", text, completion)
		}
	})

	t.Run("errors", func(t *testing.T) {
		_, err := client.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "no-such-model", Messages: msgs})
		var apiErr *oai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" || apiErr.Param != "model" {
			t.Errorf("unknown model: %v", err)
		}
		_, err = client.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: testModel, Messages: msgs, N: oai.Int(2)})
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "n" {
			t.Errorf("n=2: %v", err)
		}
		_, err = client.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: testModel, Messages: msgs},
			option.WithHeader(FaultHeader, "503"))
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 503 || apiErr.Type != "overloaded_error" {
			t.Errorf("injected 503: %v", err)
		}
		stream := client.Chat.Completions.NewStreaming(ctx, oai.ChatCompletionNewParams{
			Model: testModel, Messages: msgs, MaxTokens: oai.Int(50)}, option.WithHeader(FaultHeader, "reset"))
		for stream.Next() {
		}
		if stream.Err() == nil {
			t.Error("a reset stream ended without an error")
		}
	})
}
