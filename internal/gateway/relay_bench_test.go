package gateway

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// discardResponse is a client that takes every byte at once: a relay's
// own work without a socket.
type discardResponse struct{ h http.Header }

func (d *discardResponse) Header() http.Header         { return d.h }
func (d *discardResponse) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardResponse) WriteHeader(int)             {}
func (d *discardResponse) FlushError() error           { return nil }

// BenchmarkRelayEvents is the gateway's whole per-event work on a stream
// after the first token, without sockets: 64 content events (continuous
// usage) and [DONE] read from memory, each framed, classified, counted
// (its instant, its tokens, the idle timeout's stamp, the stages' clock
// readings) and written to a client that discards, then the final
// Server-Timing comment and trailer. ns/event is the relay's CPU per
// event; allocs/op is per stream.
func BenchmarkRelayEvents(b *testing.B) {
	var buf bytes.Buffer
	for i := 1; i <= 64; i++ {
		fmt.Fprintf(&buf, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":512,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n", i, 512+i)
	}
	buf.WriteString("data: [DONE]\n\n")
	payload := buf.Bytes()
	g := quickGateway(b, "http://127.0.0.1:1")
	defer g.Close()
	src := bytes.NewReader(payload)
	x := &exchange{g: g}
	a := &attempt{idleTimeout: time.Minute, cancel: func() {}}
	a.resp = &http.Response{Header: http.Header{"Content-Type": {"text/event-stream"}}}
	a.upv = waitReader{r: src, now: g.mono}
	a.up = &a.upv
	initEventReader(&a.rdv, a.up, a.rdBuf[:])
	a.rd = &a.rdv
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		src.Reset(payload)
		a.rdv.Reset(a.up, nil)
		x.w = &discardResponse{h: http.Header{}}
		x.tl = timeline{start: g.now()}
		x.fed = true
		a.first, a.tokens, a.lastUse, a.pending = x.tl.start, 0, 0, nil
		x.rel = relay{}
		x.newRelay(ctx, a).events()
		if x.tokens < 64 || x.errKind != "" {
			b.Fatalf("relayed %d tokens, error %q", x.tokens, x.errKind)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/65, "ns/event")
}
