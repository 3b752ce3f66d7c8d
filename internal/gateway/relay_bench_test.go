package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/process"
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
	a.buf = new(attemptBuf)
	a.rd = a.buf.reader(src, g, false)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		src.Reset(payload)
		a.rd.Reset(&a.buf.up, nil)
		x.w = &discardResponse{h: http.Header{}}
		x.tl = timeline{start: g.now()}
		x.eventState = eventState{fed: true}
		a.first, a.tokens, a.lastUse, a.pending = x.tl.start, 0, 0, nil
		x.rel = relay{}
		x.dequeued.Store(true) // no pool: no slot to give back
		x.newRelay(ctx, a).events()
		if x.tokens < 64 || x.errKind != "" {
			b.Fatalf("relayed %d tokens, error %q", x.tokens, x.errKind)
		}
		x.releaseChunks() // as finish does
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/65, "ns/event")
}

// cannedUpstream answers every request at once with a one-token stream
// (role chunk, one content chunk, [DONE]) from memory, with the headers an
// OpenAI-compatible server sends: an upstream without sockets.
type cannedUpstream struct{ body string }

func (c cannedUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	_ = r.Body.Close()
	return &http.Response{
		StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": {"text/event-stream"}, "Cache-Control": {"no-cache"}, "Date": {"Sat, 05 Dec 2026 12:00:00 GMT"}},
		Body:    io.NopCloser(strings.NewReader(c.body)),
		Request: r,
	}, nil
}

// BenchmarkHandlerRequest is the gateway's own CPU per request, without
// sockets: one streaming chat request of one token through the handler
// (ServeHTTP: the body read and scanned, the policies, admission, the
// stage clocks, the upstream request made, the answer's first events and
// Server-Timing header written, [DONE] with the final comment, the
// trailer, the metrics observed), against an upstream answering from
// memory; and the same request through the floor proxy
// (httputil.ReverseProxy, the body read whole first, as in the other
// benchmarks). The request and response objects the benchmark makes are
// the same on both paths. cpu-ns/op is the process's CPU time per request
// (the handler's, and the garbage collector's for what it allocates);
// allocs/op its allocations.
func BenchmarkHandlerRequest(b *testing.B) {
	const body = `{"model":"m","stream":true,"messages":[{"role":"user","content":"benchmark prompt"}]}`
	canned := cannedUpstream{body: roleChunk + `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null}]}` + "\n\n" + doneEvent}
	cfg, err := QuickConfig([]string{"http://127.0.0.1:1"})
	if err != nil {
		b.Fatal(err)
	}
	g := &Gateway{Transport: canned, Metrics: NewMetrics()} // as New makes it, the upstream in memory
	if err := g.SetConfig(cfg); err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	for _, p := range []struct {
		name string
		h    http.Handler
	}{{"gw", g}, {"floor", floorProxyVia("http://127.0.0.1:1", canned)}} {
		b.Run("path="+p.name, func(b *testing.B) {
			src := strings.NewReader(body)
			req := httptest.NewRequest(http.MethodPost, "http://gw"+chatPath, nil)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("User-Agent", "Go-http-client/1.1")
			req.Header.Set("Accept-Encoding", "gzip")
			req.ContentLength = int64(len(body))
			w := &recordingResponse{}
			b.ReportAllocs()
			c0 := process.SelfCPU()
			for b.Loop() {
				src.Reset(body)
				r := *req
				r.Body = io.NopCloser(src)
				w.reset()
				p.h.ServeHTTP(w, &r)
				if w.status != http.StatusOK || w.n < len(canned.body)-len(roleChunk) {
					b.Fatalf("status %d, %d bytes", w.status, w.n)
				}
			}
			b.ReportMetric(float64(process.SelfCPU()-c0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// recordingResponse is a client that takes every byte at once and keeps
// the status and the byte count.
type recordingResponse struct {
	h      http.Header
	status int
	n      int
}

func (d *recordingResponse) reset() {
	d.h, d.status, d.n = http.Header{}, 0, 0
}
func (d *recordingResponse) Header() http.Header { return d.h }
func (d *recordingResponse) Write(p []byte) (int, error) {
	if d.status == 0 {
		d.status = http.StatusOK
	}
	d.n += len(p)
	return len(p), nil
}
func (d *recordingResponse) WriteHeader(s int) {
	if d.status == 0 {
		d.status = s
	}
}
func (d *recordingResponse) FlushError() error { return nil }
