package bench

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/workload"
)

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
