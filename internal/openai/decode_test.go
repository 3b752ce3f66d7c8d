package openai

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDecodeChatParams(t *testing.T) {
	tests := []struct {
		name string
		body string
		want Params
	}{
		{"minimal", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			Params{Model: "m"}},
		{"max_completion_tokens wins", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"max_completion_tokens":7}`,
			Params{Model: "m", MaxTokens: 7}},
		{"vllm extensions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":9,"min_tokens":3,"ignore_eos":true,"priority":-2,"return_metrics":true}`,
			Params{Model: "m", MaxTokens: 9, MinTokens: 3, IgnoreEOS: true, Priority: -2, ReturnMetrics: true}},
		{"stream options", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`,
			Params{Model: "m", Stream: true, IncludeUsage: true, ContinuousUsage: true}},
		{"continuous stats need include_usage, as in vLLM", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"continuous_usage_stats":true}}`,
			Params{Model: "m", Stream: true}},
		{"unknown fields ignored, sampling accepted", `{"model":"m","messages":[{"role":"system","content":null},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"temperature":0.7,"top_p":1,"stop":["x"],"seed":3,"n":1,"logit_bias":{"1":2},"whatever":[1]}`,
			Params{Model: "m"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := DecodeChat([]byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, r.Params()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeChatContentParts(t *testing.T) {
	r, err := DecodeChat([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a b"},{"type":"text","text":"c"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(r.Messages[0].Content); got != "a b\nc" {
		t.Errorf("content %q, want %q", got, "a b\nc")
	}
}

// decodeErrorCase is a body DecodeChat (or, completion, DecodeCompletion)
// must reject: 400, invalid_request_error, the param named and a message
// containing msgPart.
type decodeErrorCase struct {
	name, body, param, msgPart string
	completion                 bool
}

func (tt decodeErrorCase) check(t *testing.T) {
	t.Helper()
	var err *APIError
	if tt.completion {
		_, err = DecodeCompletion([]byte(tt.body))
	} else {
		_, err = DecodeChat([]byte(tt.body))
	}
	if err == nil {
		t.Fatal("accepted")
	}
	param := ""
	if err.Err.Param != nil {
		param = *err.Err.Param
	}
	if err.Status != http.StatusBadRequest || err.Err.Type != TypeInvalidRequest || param != tt.param || !strings.Contains(err.Err.Message, tt.msgPart) {
		t.Errorf("%d type %q param %q message %q, want 400 %q param %q message with %q",
			err.Status, err.Err.Type, param, err.Err.Message, TypeInvalidRequest, tt.param, tt.msgPart)
	}
}

func TestDecodeErrors(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	tests := []decodeErrorCase{
		{"empty body", ``, "", "empty", false},
		{"malformed", `{"model":`, "", "not valid JSON", false},
		{"not an object", `[1,2]`, "", "JSON object", false},
		{"missing model", `{` + msgs + `}`, "model", "model", false},
		{"missing messages", `{"model":"m"}`, "messages", "messages", false},
		{"empty messages", `{"model":"m","messages":[]}`, "messages", "messages", false},
		{"bad role", `{"model":"m","messages":[{"role":"robot","content":"x"}]}`, "messages[0].role", "unknown role", false},
		{"n 2", `{"model":"m",` + msgs + `,"n":2}`, "n", "not supported", false},
		{"n 0", `{"model":"m",` + msgs + `,"n":0}`, "n", "at least 1", false},
		{"negative max_tokens", `{"model":"m",` + msgs + `,"max_tokens":-5}`, "max_tokens", "at least 1", false},
		{"zero max_completion_tokens", `{"model":"m",` + msgs + `,"max_completion_tokens":0}`, "max_completion_tokens", "at least 1", false},
		{"absurd max_tokens", `{"model":"m",` + msgs + `,"max_tokens":99999999999}`, "max_tokens", "beyond", false},
		{"max_tokens wrong type", `{"model":"m",` + msgs + `,"max_tokens":"ten"}`, "max_tokens", "integer", false},
		{"max_tokens float", `{"model":"m",` + msgs + `,"max_tokens":1.5}`, "max_tokens", "integer", false},
		{"stream wrong type", `{"model":"m",` + msgs + `,"stream":"yes"}`, "stream", "boolean", false},
		{"model wrong type", `{"model":7,` + msgs + `}`, "model", "string", false},
		{"min above max", `{"model":"m",` + msgs + `,"max_tokens":3,"min_tokens":4}`, "min_tokens", "at most", false},
		{"negative min", `{"model":"m",` + msgs + `,"min_tokens":-1}`, "min_tokens", "between", false},
		{"stream_options without stream", `{"model":"m",` + msgs + `,"stream_options":{"include_usage":true}}`, "stream_options", "only when stream", false},
		{"temperature", `{"model":"m",` + msgs + `,"temperature":3}`, "temperature", "between", false},
		{"image part", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, "messages[0].content", "text", false},
		{"content number", `{"model":"m","messages":[{"role":"user","content":5}]}`, "messages[0].content", "content", false},
		{"second content object", `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":{}}]}`, "messages[1].content", "content", false},
		{"role number", `{"model":"m","messages":[{"role":"user","content":"a"},{"role":5,"content":"b"}]}`, "messages[1].role", "string", false},
		{"completion missing prompt", `{"model":"m"}`, "prompt", "prompt", true},
		{"completion empty prompt", `{"model":"m","prompt":""}`, "prompt", "empty", true},
		{"completion batch", `{"model":"m","prompt":["a","b"]}`, "prompt", "batched", true},
		{"completion negative id", `{"model":"m","prompt":[1,-2]}`, "prompt", "negative", true},
		{"completion empty array", `{"model":"m","prompt":[ ]}`, "prompt", "empty array", true},
		{"completion mixed ids", `{"model":"m","prompt":[1,"a"]}`, "prompt", "integers", true},
		{"completion mixed strings", `{"model":"m","prompt":["a",1]}`, "prompt", "prompt must be", true},
		{"completion bad prompt", `{"model":"m","prompt":{"a":1}}`, "prompt", "prompt", true},
		{"stop number", `{"model":"m","prompt":"x","stop":5}`, "stop", "stop", true},
		{"completion echo", `{"model":"m","prompt":"x","echo":true}`, "echo", "echo", true},
		{"completion best_of", `{"model":"m","prompt":"x","best_of":3}`, "best_of", "best_of", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.check(t) })
	}
}

// TestExactKeys: keys are matched exactly, as OpenAI's API does. A key
// that differs from a known one only in case (under the folding
// encoding/json matches keys with, which includes ſ for s and the Kelvin
// sign for k) is an unrecognized argument, and a key given twice in one
// object is rejected, so that no proxy in front can read a different
// value than the one acted on. Other unknown keys are ignored.
func TestExactKeys(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	tests := []decodeErrorCase{
		{"upper-case variant next to the key", `{"model":"m",` + msgs + `,"max_tokens":5,"MAX_TOKENS":5000}`, "MAX_TOKENS", "Unrecognized request argument supplied: MAX_TOKENS", false},
		{"variant alone", `{"model":"m",` + msgs + `,"Max_Tokens":5000}`, "Max_Tokens", "Unrecognized", false},
		{"variant of model", `{"model":"m","MODEL":"other",` + msgs + `}`, "MODEL", "Unrecognized", false},
		{"long s folds to s", `{"model":"m",` + msgs + `,"ſtream":true}`, "ſtream", "Unrecognized", false},
		{"Kelvin sign folds to k", `{"model":"m",` + msgs + `,"max_toKens":5000}`, "max_toKens", "Unrecognized", false},
		{"escaped variant", `{"model":"m",` + msgs + `,"MAX_TOKENS":5000}`, "MAX_TOKENS", "Unrecognized", false},
		{"nested in stream_options", `{"model":"m",` + msgs + `,"stream":true,"stream_options":{"INCLUDE_USAGE":true}}`, "stream_options.INCLUDE_USAGE", "Unrecognized", false},
		{"nested in a message", `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","Content":"b"}]}`, "messages[1].Content", "Unrecognized", false},
		{"nested in a content part", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","TEXT":"b"}]}]}`, "messages[0].content[0].TEXT", "Unrecognized", false},
		{"completion prompt variant", `{"model":"m","prompt":"x","Prompt":"a much longer prompt"}`, "Prompt", "Unrecognized", true},
		{"duplicate max_tokens", `{"model":"m",` + msgs + `,"max_tokens":5,"max_tokens":5000}`, "max_tokens", "duplicate", false},
		{"duplicate through an escape", `{"model":"m",` + msgs + `,"max_tokens":5,"max_tokens":5000}`, "max_tokens", "duplicate", false},
		{"duplicate unknown key", `{"model":"m",` + msgs + `,"foo":1,"foo":2}`, "foo", "duplicate", false},
		{"duplicate content", `{"model":"m","messages":[{"role":"user","content":"a","content":"b"}]}`, "messages[0].content", "duplicate", false},
		{"duplicate completion prompt", `{"model":"m","prompt":"x","prompt":"y"}`, "prompt", "duplicate", true},
		{"nesting beyond the scanner's depth", `{"model":"m",` + msgs + `,"x":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`, "", "deep", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.check(t) })
	}
}

func TestDecodeCompletionPrompts(t *testing.T) {
	tests := []struct {
		body   string
		text   string
		tokens []int32
		max    int
	}{
		{`{"model":"m","prompt":"hello world"}`, "hello world", nil, 16},
		{`{"model":"m","prompt":["one"],"max_tokens":3}`, "one", nil, 3},
		{`{"model":"m","prompt":[5,6,7]}`, "", []int32{5, 6, 7}, 16},
		{`{"model":"m","prompt":[[8,9]]}`, "", []int32{8, 9}, 16},
		{`{"model":"m","prompt":[ ` + "\n\t" + `5 ,6]}`, "", []int32{5, 6}, 16},
		{`{"model":"m","prompt":[  [8] ]}`, "", []int32{8}, 16},
		{`{"model":"m","prompt":[ "two words" ]}`, "two words", nil, 16},
	}
	for _, tt := range tests {
		r, err := DecodeCompletion([]byte(tt.body))
		if err != nil {
			t.Fatalf("%s: %v", tt.body, err)
		}
		if r.Prompt.Text != tt.text || !cmp.Equal(r.Prompt.Tokens, tt.tokens) || r.Params().MaxTokens != tt.max {
			t.Errorf("%s: got %q %v max %d", tt.body, r.Prompt.Text, r.Prompt.Tokens, r.Params().MaxTokens)
		}
	}
}

// FuzzDecode checks that no body makes the decoders panic, and that every
// rejection is a well-formed 4xx.
func FuzzDecode(f *testing.F) {
	seeds := []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"model":"m","prompt":[[1,2]],"max_tokens":3}`,
		`{"model":"m","prompt":["a"],"min_tokens":2,"ignore_eos":true}`,
		`{"model":"m","prompt":null}`, `[]`, `null`, `{`, `"x"`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, decode := range []func([]byte) *APIError{
			func(b []byte) *APIError { _, e := DecodeChat(b); return e },
			func(b []byte) *APIError { _, e := DecodeCompletion(b); return e },
		} {
			e := decode(body)
			if e == nil {
				continue
			}
			if e.Status < 400 || e.Status > 499 || e.Err.Message == "" || e.Err.Type == "" {
				t.Fatalf("bad rejection %+v", e)
			}
		}
		if r, e := DecodeChat(body); e == nil {
			p := r.Params()
			if p.Model == "" || len(r.Messages) == 0 || p.MaxTokens < 0 || p.MinTokens < 0 || (p.MaxTokens > 0 && p.MinTokens > p.MaxTokens) {
				t.Fatalf("accepted invalid chat request: %+v", p)
			}
		}
		if r, e := DecodeCompletion(body); e == nil {
			p := r.Params()
			if p.Model == "" || p.MaxTokens < 1 || (r.Prompt.Text == "" && len(r.Prompt.Tokens) == 0) {
				t.Fatalf("accepted invalid completion request: %+v %+v", p, r.Prompt)
			}
		}
	})
}

// BenchmarkDecodeChat decodes a chat request of 16 messages (about 8 KB):
// the whole of DecodeChat, and its exact-key walk alone.
func BenchmarkDecodeChat(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":128,"temperature":0.7,"messages":[`)
	for i := range 16 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"role":"user","content":%q}`, strings.Repeat("lorem ipsum dolor sit amet ", 18))
	}
	sb.WriteString(`]}`)
	body := []byte(sb.String())
	b.Run("DecodeChat", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if _, err := DecodeChat(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("checkKeys", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if err := checkKeys(body, chatShape); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestCheckKeysAllocations: the exact-key check of a body whose keys are
// all known and unescaped copies none of them (a map lookup by the raw
// key): a completion request's check allocates nothing (6 allocations
// before, one a key).
func TestCheckKeysAllocations(t *testing.T) {
	body := []byte(`{"model":"m","prompt":"one two","max_tokens":32,"ignore_eos":true,"stream":true,"temperature":0.5}`)
	if err := checkKeys(body, completionShape); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = checkKeys(body, completionShape) }); n != 0 {
		t.Errorf("checking 6 known keys allocates %v times, want 0", n)
	}
}
