package serve

import (
	"net/http"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/openai"
)

// discardWriter is an http.ResponseWriter that flushes like net/http's
// and keeps nothing: what a chunk costs before net/http's writer and the
// write system call.
type discardWriter struct {
	h http.Header
	n int
}

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Write(p []byte) (int, error) { d.n += len(p); return len(p), nil }
func (d *discardWriter) FlushError() error           { return nil }

// BenchmarkStreamChunk is serve's own work per streamed chunk, one token
// per engine event as at a decode step: the event's metrics (observe),
// the faults check, the chunk's text and JSON, its SSE framing, the
// clock reading and the write lateness in both histograms. The event's
// hand-off from the engine (Stream.Recv), net/http's response writer and
// the write system call are not in it (BenchmarkStreams has them).
func BenchmarkStreamChunk(b *testing.B) {
	for _, name := range []string{"completion", "chat"} {
		b.Run(name, func(b *testing.B) {
			s, err := New(streamsConfig(1, 0, 20*time.Millisecond))
			if err != nil {
				b.Fatal(err)
			}
			api := openai.APICompletions
			if name == "chat" {
				api = openai.APIChat
			}
			x := &exchange{api: api, rid: "0123456789-1", received: time.Now(),
				prompt: make([]int32, 8), p: openai.Params{Stream: true, MaxTokens: 1 << 30}}
			w := &discardWriter{h: http.Header{}}
			c := s.newChunks(w, nil, x)
			at := time.Now()
			ev := engine.Event{At: at, Tokens: 1}
			if !c.emit(ev, true, 0) {
				b.Fatal("emit failed")
			}
			sent, prevAt, stalled := 1, at, false
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				ev.At = prevAt.Add(20 * time.Millisecond)
				s.observe(nil, x, ev, prevAt, false)
				if s.faultsBeforeWrite(b.Context(), x, &stalled, false, sent, ev) != faultNone {
					b.Fatal("a fault without faults")
				}
				if !c.emit(ev, false, sent) {
					b.Fatal("emit failed")
				}
				sent, prevAt = sent+ev.Tokens, ev.At
			}
			b.StopTimer()
			b.ReportMetric(float64(w.n)/float64(b.N+1), "bytes/chunk")
		})
	}
}
