package gateway

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// The stage tests run the gateway on a clock they move themselves, with an
// upstream and a client that block until the test lets them go on. The
// test advances the clock only while the gateway is blocked at a known
// point (reading the upstream, writing to the client), so every stage is
// known exactly and no figure depends on how busy the machine is.

// testClock is a clock the test moves.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// stepBody is an upstream response body served piece by piece: each Read
// that needs bytes announces itself on reads, then waits for the test's
// next piece (io.EOF once pieces is closed).
type stepBody struct {
	reads  chan struct{}
	pieces chan []byte
	rest   []byte
}

func (b *stepBody) Read(p []byte) (int, error) {
	if len(b.rest) == 0 {
		b.reads <- struct{}{}
		piece, ok := <-b.pieces
		if !ok {
			return 0, io.EOF
		}
		b.rest = piece
	}
	n := copy(p, b.rest)
	b.rest = b.rest[n:]
	return n, nil
}

func (b *stepBody) Close() error { return nil }

// stepWriter is the client: each Write announces itself on writes, then
// waits for release.
type stepWriter struct {
	h       http.Header
	code    int
	writes  chan struct{}
	release chan struct{}
	mu      sync.Mutex
	out     bytes.Buffer
}

func (w *stepWriter) Header() http.Header  { return w.h }
func (w *stepWriter) WriteHeader(code int) { w.code = code }
func (w *stepWriter) Flush()               {}

func (w *stepWriter) Write(p []byte) (int, error) {
	w.writes <- struct{}{}
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out.Write(p)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// stepHarness is one streaming request through a gateway on a testClock.
type stepHarness struct {
	t     *testing.T
	g     *Gateway
	clock *testClock
	body  *stepBody
	w     *stepWriter
	done  chan struct{}
	sent  chan struct{} // a write to the client was timed (Gateway.sentTest)
	// reading: the relay's wait on the upstream was seen already
	// (clientWhileReading).
	reading bool
}

func newStepHarness(t *testing.T) *stepHarness {
	t.Helper()
	h := &stepHarness{t: t, clock: &testClock{t: time.Unix(1000, 0)},
		body: &stepBody{reads: make(chan struct{}), pieces: make(chan []byte)},
		w:    &stepWriter{h: http.Header{}, writes: make(chan struct{}), release: make(chan struct{})},
		done: make(chan struct{}), sent: make(chan struct{})}
	h.g = &Gateway{Now: h.clock.Now, sentTest: func() { h.sent <- struct{}{} }, Metrics: NewMetrics(), Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: h.body, Request: r}, nil
	})}
	cfg, err := QuickConfig([]string{"http://upstream.invalid"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.g.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.g.Close)
	go func() {
		defer close(h.done)
		h.g.ServeHTTP(h.w, httptest.NewRequest(http.MethodPost, chatPath, strings.NewReader(chatBody("m", true, "x", `,"stream_options":{"include_usage":true}`))))
	}()
	return h
}

// waitOn receives from c, failing the test after 10 s (a gateway that
// never reaches the point the script expects).
func (h *stepHarness) waitOn(c chan struct{}, what string) {
	h.t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		h.t.Fatalf("the gateway never %s", what)
	}
}

// upstream lets the upstream take d, then deliver piece.
func (h *stepHarness) upstream(d time.Duration, piece string) {
	h.t.Helper()
	if !h.reading {
		h.waitOn(h.body.reads, "read the upstream")
	}
	h.reading = false
	h.clock.Advance(d)
	h.body.pieces <- []byte(piece)
}

// upstreamEnd lets the upstream take d, then end its body.
func (h *stepHarness) upstreamEnd(d time.Duration) {
	h.t.Helper()
	h.waitOn(h.body.reads, "read the upstream to its end")
	h.clock.Advance(d)
	close(h.body.pieces)
}

// client lets the client take d to accept one write, and waits for the
// gateway to have timed it.
func (h *stepHarness) client(d time.Duration) {
	h.t.Helper()
	h.waitOn(h.w.writes, "wrote to the client")
	h.clock.Advance(d)
	h.w.release <- struct{}{}
	h.waitOn(h.sent, "timed its write to the client")
}

// clientWhileReading is client for a write the relay does not wait for:
// the client's d passes once the relay waits on the upstream again, as
// it does while its events are sent (the clock does not move before the
// relay is there, however the goroutines are scheduled).
func (h *stepHarness) clientWhileReading(d time.Duration) {
	h.t.Helper()
	h.waitOn(h.w.writes, "wrote to the client")
	h.waitOn(h.body.reads, "read the upstream while its events were sent")
	h.reading = true
	h.clock.Advance(d)
	h.w.release <- struct{}{}
	h.waitOn(h.sent, "timed its write to the client")
}

// finish waits for the handler and returns the stages of its
// Server-Timing header and trailer.
func (h *stepHarness) finish() map[latency.TimingName]time.Duration {
	h.t.Helper()
	h.waitOn(h.done, "finished")
	return timingMap(h.w.h.Get("Server-Timing"), h.w.h.Get(http.TrailerPrefix+"Server-Timing"))
}

// TestSlowClientTimeIsBackpressure: time the client takes to accept
// writes is backpressure, time the upstream takes to send is decode
// (upstream_ttft before the first token), the stages end with the [DONE]
// written to the client (the upstream's late trailer comes after them: it
// was counted as decode before), and the gateway's own work (which takes
// no time on this clock) is post_process: each exactly.
func TestSlowClientTimeIsBackpressure(t *testing.T) {
	h := newStepHarness(t)
	h.upstream(10*time.Millisecond, roleChunk+textChunk) // first token after 10 ms
	h.clientWhileReading(7 * time.Millisecond)           // the first events
	for range 3 {
		h.upstream(20*time.Millisecond, textChunk)
		h.clientWhileReading(300 * time.Millisecond) // a slow reader
	}
	h.upstream(0, doneEvent)
	h.client(5 * time.Millisecond)      // the server-timing comment and [DONE], at once
	h.upstreamEnd(4 * time.Millisecond) // its trailers come late: after the end
	st := h.finish()
	want := map[latency.TimingName]time.Duration{
		latency.TimingGatewayIn: 0, latency.TimingGatewayQueue: 0, latency.TimingConnect: 0, latency.TimingUpstreamTTFT: 10 * time.Millisecond,
		latency.TimingDecode: 60 * time.Millisecond, latency.TimingPostProcess: 0, latency.TimingBackpressure: 912 * time.Millisecond, "total": 982 * time.Millisecond,
	}
	for k, v := range want {
		if st[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, st[k], v, st)
		}
	}
	if !strings.HasSuffix(h.w.out.String(), doneEvent) {
		t.Errorf("stream ends %q", h.w.out.String())
	}
}

// TestContinuousUsageGivesPerTokenITL: three chunks of 2 tokens each
// (cumulative usage 2, 4, 6), 10 ms apart: N − 1 = 5 per-token gaps, one
// 0 (the first chunk's second token), then 5 ms twice per later chunk.
func TestContinuousUsageGivesPerTokenITL(t *testing.T) {
	chunk := func(used int) string {
		return `data: {"choices":[{"index":0,"delta":{"content":"tt"}}],"usage":{"prompt_tokens":3,"completion_tokens":` +
			string(rune('0'+used)) + `,"total_tokens":9}}` + "\n\n"
	}
	h := newStepHarness(t)
	h.upstream(10*time.Millisecond, roleChunk+chunk(2))
	h.client(0)
	h.upstream(10*time.Millisecond, chunk(4))
	h.client(0)
	h.upstream(10*time.Millisecond, chunk(6))
	h.client(0)
	h.upstream(0, doneEvent)
	h.client(0)
	h.upstreamEnd(0)
	h.finish()
	var m dto.Metric
	if err := h.g.Metrics.ITL.WithLabelValues("default", "*").(prometheusMetric).Write(&m); err != nil {
		t.Fatal(err)
	}
	if n, sum := m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum(); n != 5 || sum != 0.020 {
		t.Errorf("ITL: %d samples summing to %v s, want 5 summing to 0.020", n, sum)
	}
	if err := h.g.Metrics.TPOT.WithLabelValues("default", "*").(prometheusMetric).Write(&m); err != nil {
		t.Fatal(err)
	}
	// TPOT = (E2E − TTFT) / (N − 1) = (30 − 10) ms / 5 = 4 ms.
	if n, sum := m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum(); n != 1 || sum != 0.004 {
		t.Errorf("TPOT: %d samples, sum %v, want one of 0.004", n, sum)
	}
}

type prometheusMetric interface{ Write(*dto.Metric) error }
