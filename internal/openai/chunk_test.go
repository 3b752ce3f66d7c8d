package openai

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func ptr[T any](v T) *T { return &v }

func TestChunkEncoderChat(t *testing.T) {
	e := NewChunkEncoder(true, "chatcmpl-1", `m"x`, 1700000000)
	tests := []struct {
		name string
		got  []byte
		want ChatCompletionChunk
	}{
		{"role", e.AppendRole(nil, nil), ChatCompletionChunk{
			Choices: []ChunkChoice{{Delta: ChunkDelta{Role: "assistant", Content: ptr("")}}}}},
		{"text", e.AppendText(nil, []byte("a b"), "", nil), ChatCompletionChunk{
			Choices: []ChunkChoice{{Delta: ChunkDelta{Content: ptr("a b")}}}}},
		{"last with usage", e.AppendText(nil, []byte(" c"), "length", &Usage{PromptTokens: 4, CompletionTokens: 3, TotalTokens: 7}), ChatCompletionChunk{
			Choices: []ChunkChoice{{Delta: ChunkDelta{Content: ptr(" c")}, FinishReason: ptr("length")}},
			Usage:   &Usage{PromptTokens: 4, CompletionTokens: 3, TotalTokens: 7}}},
		{"usage", e.AppendUsage(nil, Usage{PromptTokens: 4, CompletionTokens: 3, TotalTokens: 7, PromptTokensDetails: &PromptTokensDetails{CachedTokens: 2}}, &RequestMetrics{QueueTimeMs: 1.5}), ChatCompletionChunk{
			Choices: []ChunkChoice{},
			Usage:   &Usage{PromptTokens: 4, CompletionTokens: 3, TotalTokens: 7, PromptTokensDetails: &PromptTokensDetails{CachedTokens: 2}},
			Metrics: &RequestMetrics{QueueTimeMs: 1.5}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.want.ID, tt.want.Object, tt.want.Created, tt.want.Model = "chatcmpl-1", ObjectChatCompletionChunk, 1700000000, `m"x`
			for i := range tt.want.Choices {
				tt.want.Choices[i].Logprobs = json.RawMessage("null")
			}
			var got ChatCompletionChunk
			if err := json.Unmarshal(tt.got, &got); err != nil {
				t.Fatalf("%s: %v", tt.got, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("%s\n(-want +got):\n%s", tt.got, diff)
			}
		})
	}
}

func TestChunkEncoderCompletion(t *testing.T) {
	e := NewChunkEncoder(false, "cmpl-9", "m", 5)
	var got CompletionChunk
	b := e.AppendText(nil, []byte("x\ty"), "stop", &Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3})
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	want := CompletionChunk{ID: "cmpl-9", Object: ObjectTextCompletion, Created: 5, Model: "m",
		Choices: []CompletionChoice{{Text: "x\ty", Logprobs: json.RawMessage("null"), FinishReason: ptr("stop")}},
		Usage:   &Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestChunkEncoderReset: an encoder reset for another stream writes what
// a new one would (kind, id, model and created all changed, the head
// shorter and then longer than before), and once its buffer holds the
// head, a reset allocates nothing.
func TestChunkEncoderReset(t *testing.T) {
	e := NewChunkEncoder(true, "chatcmpl-a-long-id-1", "model-one", 1)
	for _, c := range []struct {
		chat      bool
		id, model string
		created   int64
	}{
		{false, "cmpl-2", "m", 2},
		{true, "chatcmpl-a-much-longer-id-than-before-3", "another-model", 3},
	} {
		e.Reset(c.chat, c.id, c.model, c.created)
		want := NewChunkEncoder(c.chat, c.id, c.model, c.created)
		if got, w := e.AppendText(nil, []byte("x"), "stop", nil), want.AppendText(nil, []byte("x"), "stop", nil); string(got) != string(w) {
			t.Errorf("reset encoder %s, new one %s", got, w)
		}
	}
	if n := testing.AllocsPerRun(100, func() { e.Reset(true, "chatcmpl-1", "m", 4) }); n != 0 {
		t.Errorf("a reset allocates %v times, want 0", n)
	}
}

// FuzzAppendString checks the string escaper against encoding/json.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "q\"b\\", "ctl\x00\x1f", "<&>", "é\u2028\u2029", "\xff\xfe", "日本"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := AppendString(nil, s)
		want, _ := json.Marshal(s)
		if string(got) != string(want) {
			t.Fatalf("AppendString(%q) = %s, encoding/json %s", s, got, want)
		}
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatal(err)
		}
		if utf8.ValidString(s) && back != s {
			t.Fatalf("round trip %q → %q", s, back)
		}
	})
}
