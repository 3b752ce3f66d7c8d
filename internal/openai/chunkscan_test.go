package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/jsonscan"
)

func TestScanChunk(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		want  ChunkInfo
		shape bool // ErrChunkShape
	}{
		{"role only", `{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
			ChunkInfo{Choices: 1, Content: []byte{}}, false},
		{"content and usage", `{"choices":[{"index":0,"delta":{"content":"a\"b"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":3},"completion_tokens_details":{"reasoning_tokens":1}}}`,
			ChunkInfo{Choices: 1, Content: []byte(`a\"b`), Finish: []byte("stop"), HasFinish: true, Output: true, HasUsage: true,
				PromptTokens: 5, CompletionTokens: 2, HasPrompt: true, HasCompletion: true, CachedTokens: 3, ReasoningTokens: 1}, false},
		{"text of the second choice", `{"choices":[{"text":""},{"text":"y"}]}`, ChunkInfo{Choices: 2, Text: []byte{}, Output: true}, false},
		{"reasoning", `{"choices":[{"delta":{"reasoning_content":"hm","reasoning":"","content":null}}]}`,
			ChunkInfo{Choices: 1, Reasoning: []byte("hm"), Output: true}, false},
		{"tool calls", `{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}`, ChunkInfo{Choices: 1, Output: true}, false},
		{"no tool calls", `{"choices":[{"delta":{"tool_calls":[]}},{"delta":{"tool_calls":null}}]}`, ChunkInfo{Choices: 2}, false},
		{"message", `{"choices":[{"message":{"content":"whole"}}]}`, ChunkInfo{Choices: 1, Content: []byte("whole"), Output: true}, false},
		{"error and metrics", `{"error":{"message":"boom"},"metrics":{"queue_time_ms":1.5},"usage":null}`,
			ChunkInfo{Error: []byte(`{"message":"boom"}`), Metrics: []byte(`{"queue_time_ms":1.5}`)}, false},
		{"null error", `{"error":null,"choices":null}`, ChunkInfo{}, false},
		{"llama.cpp timings", `{"choices":[{"finish_reason":"length","delta":{}}],"timings":{"prompt_n":3,"prompt_ms":1.5,"predicted_ms":2}}`,
			ChunkInfo{Choices: 1, Finish: []byte("length"), HasFinish: true, Timings: []byte(`{"prompt_n":3,"prompt_ms":1.5,"predicted_ms":2}`)}, false},
		// Keys are exact: a case variant is another key.
		{"case variant", `{"Choices":[{"delta":{"content":"x"}}],"choices":[{"delta":{"Content":"x"}}],"USAGE":{"completion_tokens":1}}`,
			ChunkInfo{Choices: 1}, false},
		{"spaced", " { \"choices\" : [ { \"delta\" : { \"content\" : \"x\" } } ] } ", ChunkInfo{Choices: 1, Content: []byte("x"), Output: true}, false},
		{"content not a string", `{"choices":[{"delta":{"content":[{"type":"text"}]}},{"text":"y"}]}`, ChunkInfo{Choices: 2, Output: true}, true},
		{"fractional tokens", `{"usage":{"completion_tokens":1.5,"prompt_tokens":3}}`, ChunkInfo{HasUsage: true, PromptTokens: 3, HasPrompt: true}, true},
		{"choices an object", `{"choices":{"a":1}}`, ChunkInfo{}, true},
	}
	for _, tt := range tests {
		var c ChunkInfo
		err := ScanChunk([]byte(tt.in), &c)
		if tt.shape != errors.Is(err, ErrChunkShape) || (!tt.shape && err != nil) {
			t.Errorf("%s: err %v, want shape error %v", tt.name, err, tt.shape)
		}
		if diff := cmp.Diff(tt.want, c); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
	for _, notObject := range []string{`[1,2]`, `null`, ` "x"`, ``} {
		if err := ScanChunk([]byte(notObject), new(ChunkInfo)); !errors.Is(err, errNotObject) {
			t.Errorf("%q: err %v, want errNotObject", notObject, err)
		}
	}
	for _, bad := range []string{`{`, `{"choices":[{"delta":{"content":"x"}}]} trailing`, `{"usage":{"prompt_tokens":01}}`,
		`{"choices":[{"text":nul}]}`, `{"a":"\x01"}`, `{"choices":[{"delta":{"content":"x"}]}`} {
		var c ChunkInfo
		err := ScanChunk([]byte(bad), &c)
		var se *jsonscan.SyntaxError
		if !errors.As(err, &se) || errors.Is(err, ErrChunkShape) {
			t.Errorf("%q: err %v, want a syntax error", bad, err)
		}
	}
}

// errAmbiguous is refChunk's answer for a chunk whose reading depends on
// the order of its keys, which a map loses.
var errAmbiguous = errors.New("ambiguous")

// refChunk is the reference: encoding/json into generic values, keys
// looked up exactly. ok is false for a chunk of another shape.
func refChunk(b []byte) (_ ChunkInfo, ok bool, _ error) {
	var top map[string]any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if d.Decode(&top) != nil || d.More() {
		return ChunkInfo{}, false, nil
	}
	var c ChunkInfo
	ok = true
	str := func(m map[string]any, k string) (string, bool) {
		switch v := m[k].(type) {
		case nil:
			return "", false
		case string:
			return v, true
		}
		ok = false
		return "", false
	}
	count := func(m map[string]any, k string) (int, bool) {
		switch v := m[k].(type) {
		case nil:
			return 0, false
		case json.Number:
			if n, err := v.Int64(); err == nil {
				return int(n), true
			}
		}
		ok = false
		return 0, false
	}
	if ch, present := top["choices"]; present && ch != nil {
		arr, isArr := ch.([]any)
		if !isArr {
			return c, false, nil
		}
		c.Choices = len(arr)
		for i, e := range arr {
			choice, isObj := e.(map[string]any)
			if !isObj {
				ok = false
				continue
			}
			text, _ := str(choice, "text")
			finish, hasFinish := str(choice, "finish_reason")
			var content, reasoning string
			tools := false
			if choice["delta"] != nil && choice["message"] != nil {
				return c, false, errAmbiguous
			}
			for _, k := range []string{"delta", "message"} {
				if dv, present := choice[k]; present && dv != nil {
					delta, isObj := dv.(map[string]any)
					if !isObj {
						ok = false
						continue
					}
					content, _ = str(delta, "content")
					r1, _ := str(delta, "reasoning_content")
					r2, _ := str(delta, "reasoning")
					reasoning = r1 + r2
					switch tc := delta["tool_calls"].(type) {
					case nil:
					case []any:
						tools = len(tc) > 0
					default:
						ok = false
					}
				}
			}
			if content != "" || reasoning != "" || text != "" || tools {
				c.Output = true
			}
			if i == 0 {
				c.Content, c.Reasoning, c.Text = []byte(content), []byte(reasoning), []byte(text)
				c.Finish, c.HasFinish = []byte(finish), hasFinish
			}
		}
	}
	if uv, present := top["usage"]; present && uv != nil {
		u, isObj := uv.(map[string]any)
		if !isObj {
			return c, false, nil
		}
		c.HasUsage = true
		c.PromptTokens, c.HasPrompt = count(u, "prompt_tokens")
		c.CompletionTokens, c.HasCompletion = count(u, "completion_tokens")
		for _, d := range []struct {
			k, key string
			dst    *int
		}{{"prompt_tokens_details", "cached_tokens", &c.CachedTokens}, {"completion_tokens_details", "reasoning_tokens", &c.ReasoningTokens}} {
			if dv, present := u[d.k]; present && dv != nil {
				dm, isObj := dv.(map[string]any)
				if !isObj {
					ok = false
					continue
				}
				*d.dst, _ = count(dm, d.key)
			}
		}
	}
	c.Error, c.Metrics, c.Timings = raw(top["error"]), raw(top["metrics"]), raw(top["timings"])
	return c, ok, nil
}

func raw(v any) []byte {
	if v == nil {
		return nil
	}
	b, _ := json.Marshal(v)
	return b
}

// FuzzScanChunk checks ScanChunk against encoding/json with exact keys:
// it accepts exactly the valid JSON, calls a shape error exactly what the
// reference cannot read, and reads the same fields (raw strings compared
// by emptiness, error and metrics by value).
func FuzzScanChunk(f *testing.F) {
	for _, s := range []string{
		`{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"content":"a\"b\u00e9"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2}}`,
		`{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":3},"completion_tokens_details":{"reasoning_tokens":1}}}`,
		`{"choices":[{"text":"x","finish_reason":null},{"text":"y"}]}`,
		`{"choices":[{"delta":{"reasoning_content":"hm","content":null,"tool_calls":[{}]}}],"metrics":{"queue_time_ms":1.5}}`,
		`{"error":{"message":"boom","type":"server_error"}}`,
		`{"choices":[{"delta":{}}],"timings":{"cache_n":0,"prompt_n":21,"prompt_ms":20.2,"predicted_n":16,"predicted_ms":75.5}}`,
		`{"choices":[{"delta":{"content":"x"}}]} trailing`,
		`{"usage":{"prompt_tokens":1.5}}`,
		`{"Choices":[{"Delta":{"content":"x"}}],"a":[1,-2.5e3,true,false,null,{"b":"c"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var c ChunkInfo
		err := ScanChunk(b, &c)
		ref, refOK, refErr := refChunk(b)
		valid := json.Valid(b)
		var se *jsonscan.SyntaxError
		switch {
		case len(bytes.TrimLeft(b, " \t\r\n")) == 0 || bytes.TrimLeft(b, " \t\r\n")[0] != '{':
			if !errors.Is(err, errNotObject) {
				t.Fatalf("%q is not an object: err %v", b, err)
			}
			return
		case errors.As(err, &se) && !errors.Is(err, ErrChunkShape):
			if valid {
				t.Fatalf("syntax error %v on valid JSON %q", err, b)
			}
			return
		case !valid:
			t.Fatalf("accepted invalid JSON %q (err %v)", b, err)
		case refErr != nil:
			return
		case errors.Is(err, ErrChunkShape) == refOK:
			t.Fatalf("shape error %v, reference reads it: %v: %q", err, refOK, b)
		case err != nil:
			return
		}
		// Raw strings are still escaped: compare their emptiness.
		empty := cmp.Comparer(func(x, y []byte) bool { return (len(x) == 0) == (len(y) == 0) })
		ref.Finish, c.Finish = nil, nil // HasFinish says it
		if string(canon(ref.Error)) != string(canon(c.Error)) || string(canon(ref.Metrics)) != string(canon(c.Metrics)) ||
			string(canon(ref.Timings)) != string(canon(c.Timings)) {
			t.Fatalf("%q: error %s, metrics %s, timings %s; reference %s, %s, %s", b, c.Error, c.Metrics, c.Timings, ref.Error, ref.Metrics, ref.Timings)
		}
		ref.Error, ref.Metrics, ref.Timings, c.Error, c.Metrics, c.Timings = nil, nil, nil, nil, nil, nil
		if diff := cmp.Diff(ref, c, empty); diff != "" {
			t.Fatalf("%q (-reference +ScanChunk):\n%s", b, diff)
		}
	})
}

// canon re-encodes a JSON value (nil stays nil), so that two texts of one
// value compare equal.
func canon(b []byte) []byte {
	if b == nil {
		return nil
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if d.Decode(&v) != nil {
		return b
	}
	out, _ := json.Marshal(v)
	return out
}

func BenchmarkScanChunk(b *testing.B) {
	for _, tt := range []struct{ name, data string }{
		{"content", `{"id":"chatcmpl-123","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}]}`},
		{"usage", `{"id":"chatcmpl-123","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":512,"completion_tokens":17,"total_tokens":529}}`},
		{"responses", `{"type":"response.output_text.delta","sequence_number":10,"item_id":"msg_1","output_index":1,"content_index":0,"delta":" word","logprobs":[]}`},
		{"messages", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" word"}}`},
		{"ollama", `{"model":"m","created_at":"2026-01-01T00:00:00Z","message":{"role":"assistant","content":" word"},"done":false}`},
	} {
		b.Run(tt.name, func(b *testing.B) {
			data := []byte(tt.data)
			var c ChunkInfo
			b.ReportAllocs()
			for b.Loop() {
				if err := ScanChunk(data, &c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
