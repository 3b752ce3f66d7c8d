package bench

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/racedetect"
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

// streamPayload is a chat stream of n content chunks with continuous
// usage, then [DONE].
func streamPayload(n int) []byte {
	var buf bytes.Buffer
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&buf, `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" word"},"finish_reason":null}],"usage":{"prompt_tokens":512,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n", i, 512+i)
	}
	buf.WriteString("data: [DONE]\n\n")
	return buf.Bytes()
}

// TestClientStreamAllocatesNothingPerChunk: reading a stream of 128 chunks
// allocates as often as one of 16 (the record's chunk instants are sized
// once from max_tokens), so no chunk allocates.
func TestClientStreamAllocatesNothingPerChunk(t *testing.T) {
	if racedetect.Enabled {
		t.Skip("the race detector allocates on its own")
	}
	c, err := NewClient(Target{BaseURL: "http://unused", Endpoint: EndpointChat, Stream: true, ContinuousUsage: true}, func() int64 { return 1 }, 0)
	if err != nil {
		t.Fatal(err)
	}
	allocs := func(n int) float64 {
		payload := streamPayload(n)
		req := &workload.Request{MaxTokens: n, InputTokens: 512}
		return testing.AllocsPerRun(50, func() {
			rec := &latency.Record{}
			c.readStream(context.Background(), rec, req, bytes.NewReader(payload), c.now)
			if !rec.OK() || rec.OutputTokens != n {
				t.Fatalf("%d chunks: %+v", n, rec)
			}
		})
	}
	small, large := allocs(16), allocs(128)
	t.Logf("allocations per stream: %.0f at 16 chunks, %.0f at 128", small, large)
	if large > small {
		t.Errorf("a stream of 128 chunks allocates %.0f times, one of 16 %.0f: a chunk allocates", large, small)
	}
}
