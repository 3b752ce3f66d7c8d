package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/workload"
)

func FuzzScanChunk(f *testing.F) {
	for _, s := range []string{
		`{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"content":"a\"b\u00e9"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2}}`,
		`{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":3},"completion_tokens_details":{"reasoning_tokens":1}}}`,
		`{"choices":[{"text":"x","finish_reason":null},{"text":"y"}]}`,
		`{"choices":[{"delta":{"reasoning_content":"hm","content":null}}],"metrics":{"queue_time_ms":1.5}}`,
		`{"error":{"message":"boom","type":"server_error"}}`,
		`{"choices":[{"delta":{"content":"x"}}]} trailing`,
		`{"usage":{"prompt_tokens":1.5}}`,
		`{"a":[1,-2.5e3,true,false,null,{"b":"c"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fc fastChunk
		err := scanChunk(b, &fc)
		if !isASCII(b) {
			return // encoding/json also folds the Kelvin sign and the long s in keys
		}
		var c chunk
		jerr := json.Unmarshal(b, &c)
		isObj := len(bytes.TrimLeft(b, " \t\r\n")) > 0 && bytes.TrimLeft(b, " \t\r\n")[0] == '{'
		if err == nil && jerr != nil {
			t.Fatalf("scanChunk accepted what encoding/json refuses (%v): %q", jerr, b)
		}
		if err != nil && jerr == nil && isObj {
			t.Fatalf("scanChunk refused a chunk encoding/json reads (%v): %q", err, b)
		}
		if err != nil || jerr != nil {
			return
		}
		if fc.choices != len(c.Choices) {
			t.Fatalf("choices %d vs %d: %q", fc.choices, len(c.Choices), b)
		}
		if len(c.Choices) > 0 {
			ch := c.Choices[0]
			var content, reasoning string
			if ch.Delta != nil {
				content, reasoning = str(ch.Delta.Content), str(ch.Delta.ReasoningContent)+str(ch.Delta.Reasoning)
			} else if ch.Message != nil {
				content, reasoning = str(ch.Message.Content), str(ch.Message.ReasoningContent)+str(ch.Message.Reasoning)
			}
			if (len(fc.content) > 0) != (content != "") || (len(fc.reasoning) > 0) != (reasoning != "") {
				t.Fatalf("content/reasoning emptiness differs: %q", b)
			}
			if (len(fc.text) > 0) != (str(ch.Text) != "") {
				t.Fatalf("text emptiness differs: %q", b)
			}
		}
		if (c.Usage != nil) != fc.hasUsage {
			t.Fatalf("usage presence differs: %q", b)
		}
		if c.Usage != nil && c.Usage.CompletionTokens != nil && (!fc.hasCompletion || *c.Usage.CompletionTokens != fc.completion) {
			t.Fatalf("completion tokens differ: %q", b)
		}
	})
}

func BenchmarkScanChunk(b *testing.B) {
	data := []byte(`{"id":"chatcmpl-123","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":512,"completion_tokens":17,"total_tokens":529}}`)
	b.Run("scanChunk", func(b *testing.B) {
		b.ReportAllocs()
		var c fastChunk
		for b.Loop() {
			if err := scanChunk(data, &c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var c chunk
			if err := json.Unmarshal(data, &c); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// BenchmarkClientStream is the client's whole per-event path after the
// socket: SSE framing, arrival stamps, chunk scanning and the record's
// token accounting, for a 64-token stream with continuous usage.
func BenchmarkClientStream(b *testing.B) {
	var buf bytes.Buffer
	buf.WriteString(`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":{"prompt_tokens":512,"completion_tokens":0,"total_tokens":512}}` + "\n\n")
	for i := 1; i <= 64; i++ {
		fmt.Fprintf(&buf, `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" word"},"finish_reason":null}],"usage":{"prompt_tokens":512,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n", i, 512+i)
	}
	buf.WriteString(`data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":512,"completion_tokens":64,"total_tokens":576}}` + "\n\ndata: [DONE]\n\n")
	payload := buf.Bytes()
	c, err := NewClient(Target{BaseURL: "http://unused", Endpoint: EndpointChat, Stream: true, ContinuousUsage: true}, func() int64 { return 1 }, 0)
	if err != nil {
		b.Fatal(err)
	}
	req := &workload.Request{MaxTokens: 64, InputTokens: 512}
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		rec := &latency.Record{}
		c.readStream(context.Background(), rec, req, bytes.NewReader(payload), c.now)
		if !rec.OK() || rec.OutputTokens != 64 {
			b.Fatalf("%+v", rec)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/66, "ns/event")
}
