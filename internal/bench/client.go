package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokentrace/tokentrace/internal/h1"
	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/redact"
	"github.com/tokentrace/tokentrace/internal/sse"
	"github.com/tokentrace/tokentrace/internal/staleconn"
	"github.com/tokentrace/tokentrace/internal/tracing"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// Endpoints: the APIs bench speaks (openai.API's names).
const (
	EndpointChat        = "chat"
	EndpointCompletions = "completions"
	EndpointResponses   = "responses" // OpenAI's Responses API
	EndpointMessages    = "messages"  // Anthropic's Messages API
	EndpointOllama      = "ollama"    // Ollama's native /api/chat (NDJSON)
	EndpointSGLang      = "sglang"    // SGLang's native /generate (meta_info)
)

// streamReadBuffer is the initial size of a stream's event buffer: a few
// events' worth (it grows as a longer line needs). With the transport's
// 1 KiB buffers it bounds what an in-flight stream holds for reading.
const streamReadBuffer = 512

// chunkRoom is the most chunk instants a record is made room for before
// its answer arrives: max_tokens is a ceiling most answers stay far below.
const chunkRoom = 256

// api is the target's API; chat for an endpoint of no API (checked by
// NewClient and Options).
func (t Target) api() openai.API {
	a, _ := openai.ParseAPI(t.Endpoint)
	return a
}

// checkEndpoint says why e is no endpoint bench speaks.
func checkEndpoint(e string) error {
	if _, ok := openai.ParseAPI(e); !ok {
		return fmt.Errorf("want chat, completions, responses, messages, ollama or sglang")
	}
	return nil
}

// Target is the server under test and how to talk to it.
type Target struct {
	// BaseURL is the server's base URL, with or without the trailing /v1.
	BaseURL string
	// Endpoint is one of the Endpoint constants.
	Endpoint string
	Model    string
	APIKey   string
	// Headers are sent with every request.
	Headers http.Header
	// Stream asks for a server-sent event stream.
	Stream bool
	// IgnoreEOS and MinTokens force the output length where the server
	// allows it (vLLM's ignore_eos; min_tokens = max_tokens).
	IgnoreEOS, MinTokens bool
	// ContinuousUsage asks for token counts on every chunk
	// (stream_options.continuous_usage_stats, a vLLM extension).
	ContinuousUsage bool
	// ServerMetrics is how to ask the server for its per-request evidence
	// (ServerMetrics* constants; "" is auto). Run turns it into
	// MetricsField, the body field sent as true on every request
	// ("include_metrics" for vLLM, "return_metrics" for tokentrace), ""
	// for none.
	ServerMetrics, MetricsField string
	// AnswerID records each answer's id as its ServerID (where no
	// X-Request-Id differs): Run sets it for TensorRT-LLM, whose
	// /perf_metrics records are joined to the run's by it.
	AnswerID bool
	// Timeout fails a request that receives nothing for this long (from
	// the send, or since its last byte). 0 means 10 minutes.
	Timeout time.Duration
}

// apiURL joins the base URL and the endpoint path.
func (t Target) apiURL(path string) (string, error) {
	raw := strings.TrimSpace(t.BaseURL)
	if !strings.Contains(raw, "://") {
		return "", fmt.Errorf("url %q has no scheme: add http:// (http://%s) or https://", redact.URL(raw), redact.URL(raw))
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse's error quotes the URL, credentials included: keep
		// its reason only.
		return "", fmt.Errorf("url %q: %w", redact.URL(t.BaseURL), errors.Unwrap(err))
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("url %q: want http://host[:port][/v1] or https://…", redact.URL(t.BaseURL))
	}
	p := strings.TrimSuffix(u.Path, "/")
	for _, ep := range apiEndpoints {
		if base, ok := strings.CutSuffix(p, ep); ok {
			u.Path, u.RawQuery = base, ""
			return "", fmt.Errorf("url %q is an API endpoint, not the server's base URL: give %s (--endpoint picks the API)",
				redact.URL(raw), redact.URL(u.String()))
		}
	}
	if !strings.HasSuffix(p, "/v1") {
		p += "/v1"
	}
	u.Path = p + path
	return u.String(), nil
}

// apiEndpoints are the paths under /v1 that a --url may wrongly end with.
var apiEndpoints = []string{"/chat/completions", "/completions", "/responses", "/messages", "/models", "/embeddings"}

// endpointURL is the URL the target's requests go to: the API's path
// under the base URL's /v1, or for Ollama's and SGLang's native APIs beside
// it.
func (t Target) endpointURL() (string, error) {
	api := t.api()
	if api == openai.APIOllama || api == openai.APISGLang {
		u, err := t.apiURL("")
		return strings.TrimSuffix(u, "/v1") + api.Path(), err
	}
	return t.apiURL(strings.TrimPrefix(api.Path(), "/v1"))
}

// Client sends requests to a Target and measures them into records. It is
// safe for concurrent use.
type Client struct {
	target  Target
	url     string
	hc      *http.Client
	now     func() int64
	timeout time.Duration
	bufs    sync.Pool // request bodies
	readers sync.Pool // *sse.Reader, with their buffers
	// tracer, when set, records a client span per request (Trace); epoch
	// is the wall-clock instant of the run clock's zero.
	tracer trace.Tracer
	epoch  time.Time
}

// Trace makes the client record one span per request (kind client, from
// the send to the end of the answer, with a child span per client stage:
// connect, send) and send that span's context as traceparent, so the
// servers' spans join its trace. epoch is the wall-clock instant of the
// run clock's zero. Call it before the first Do.
func (c *Client) Trace(tr trace.Tracer, epoch time.Time) { c.tracer, c.epoch = tr, epoch }

// NewClient returns a client of t. now reads the run's monotonic clock
// (nanoseconds since the start instant); every instant in a record comes
// from it. maxConns bounds connections to the server (0: no bound).
func NewClient(t Target, now func() int64, maxConns int) (*Client, error) {
	if err := checkEndpoint(t.Endpoint); err != nil {
		return nil, fmt.Errorf("endpoint %q: %w", t.Endpoint, err)
	}
	u, err := t.endpointURL()
	if err != nil {
		return nil, err
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &stampConn{Conn: c, now: now}, nil
	}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dial,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: 100000,
		MaxConnsPerHost:     maxConns,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		DisableCompression:  true, // a gzip layer would batch events
		ForceAttemptHTTP2:   true,
		// Small buffers: an in-flight stream's memory is mostly buffers
		// (docs/performance.md); events are a few hundred bytes.
		WriteBufferSize: 1 << 10,
		ReadBufferSize:  1 << 10,
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12},
	}
	to := t.Timeout
	if to <= 0 {
		to = 10 * time.Minute
	}
	// A request that meets a pooled connection its server already closed
	// (llama-server closes after each answer) is resent once on a fresh
	// one; requestTrace counts it into the record.
	st := staleconn.New(tr)
	if maxConns <= 0 && directHTTP(u) {
		st.Pooled = h1.New(dial, tr, h1.Config{MaxIdlePerHost: 100000, IdleConnTimeout: 90 * time.Second,
			ReadBufferSize: 1 << 10, WriteBufferSize: 1 << 10})
	}
	return &Client{target: t, url: u, hc: &http.Client{Transport: st, CheckRedirect: httplimit.NoRedirects}, now: now, timeout: to}, nil
}

// directHTTP says whether requests to the endpoint u go over plain
// HTTP/1.1 with no proxy: those go through internal/h1, one goroutine per
// stream (net/http's Transport keeps two more per connection, most of an
// in-flight stream's memory; docs/performance.md), the rest through
// net/http's Transport.
func directHTTP(u string) bool {
	pu, err := url.Parse(u)
	if err != nil || pu.Scheme != "http" {
		return false
	}
	p, err := http.ProxyFromEnvironment(&http.Request{URL: pu})
	return err == nil && p == nil
}

// Close releases idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// URL is the endpoint the client posts to.
func (c *Client) URL() string { return c.url }

var errSilence = errors.New("no bytes within the timeout")

// Do sends req and measures it into rec, whose ID, IntendedNS and labels
// the caller has set. It never returns an error: every failure is recorded
// on rec with its kind (latency.Err*). ctx cancels the request (the run was
// stopped).
func (c *Client) Do(ctx context.Context, req *workload.Request, rec *latency.Record) {
	rec.Schema = latency.RecordSchema
	rec.Model = c.target.Model
	rec.Stream = c.target.Stream
	rec.MaxTokens = max(req.MaxTokens, 1)
	// The body is built in a pooled scratch buffer and kept at its own
	// length for the request's life (a stream can last minutes).
	bp, _ := c.bufs.Get().(*[]byte)
	if bp == nil {
		b := make([]byte, 0, 1024)
		bp = &b
	}
	scratch := c.appendBody((*bp)[:0], req)
	body := bytes.Clone(scratch)
	*bp = scratch[:0]
	c.bufs.Put(bp)

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watch := newSilenceWatch(c.timeout, func() { cancel(errSilence) })
	defer watch.stop()

	st := &requestTrace{c: c, rec: rec}
	hreq, err := http.NewRequestWithContext(staleconn.WithClientTrace(ctx, st.trace()), http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		fail(rec, latency.FailConnect, err.Error())
		return
	}
	c.setHeaders(hreq.Header, rec)
	if c.tracer != nil {
		defer c.traceRequest(ctx, hreq.Header, rec)()
	}
	rec.SentNS = c.now()
	resp, err := c.hc.Do(hreq)
	if err != nil {
		c.failTransport(ctx, rec, err)
		return
	}
	defer resp.Body.Close()
	c.readResponse(ctx, rec, req, resp, watch.body(resp.Body), st.arrivalClock())
}

// requestTrace stamps a request's connection, write and first byte on the
// run's clock, and learns how the connection stamps its reads.
type requestTrace struct {
	c   *Client
	rec *latency.Record
	// connStart is set by the dial's hooks, which run on the transport's
	// dialing goroutines (a dial begun for the request may outlive it).
	connStart atomic.Int64
	conns     int          // connections the request got: more than one, it was resent
	arrival   func() int64 // when the bytes being read reached the process
}

func (t *requestTrace) trace() *httptrace.ClientTrace {
	now, rec := t.c.now, t.rec
	return &httptrace.ClientTrace{
		DNSStart:     func(httptrace.DNSStartInfo) { t.startConnect() },
		ConnectStart: func(string, string) { t.startConnect() },
		GotConn: func(info httptrace.GotConnInfo) {
			if t.conns++; t.conns > 1 {
				rec.Resent++ // a resend: the connection before was stale
			}
			if cs := t.connStart.Load(); !info.Reused && cs != 0 {
				rec.ConnectNS = now() - cs
			}
			t.arrival = arrivalClock(info.Conn)
		},
		WroteRequest: func(httptrace.WroteRequestInfo) { rec.WroteNS = now() },
		GotFirstResponseByte: func() {
			// The read that brought the first byte, on the same stamp as
			// the events it may have brought with it.
			rec.FirstByteNS = t.arrivalClock()()
		},
	}
}

func (t *requestTrace) startConnect() {
	t.connStart.CompareAndSwap(0, t.c.now())
}

// arrivalClock is the connection's arrival stamp, or the run's clock where
// the connection cannot stamp its reads.
func (t *requestTrace) arrivalClock() func() int64 {
	if t.arrival != nil {
		return t.arrival
	}
	return t.c.now
}

// genAIProvider is gen_ai.provider.name on bench's spans and metrics.
const genAIProvider = "tokentrace"

// genAIOperation is gen_ai.operation.name of the target's requests.
func (t Target) genAIOperation() string {
	if a := t.api(); a == openai.APICompletions || a == openai.APISGLang {
		return tracing.OpTextCompletion
	}
	return tracing.OpChat
}

// traceRequest starts the request's client span (an inference span of the
// GenAI conventions: "chat MODEL"), sets its context as the
// request's traceparent and returns what ends it with the record's
// instants.
func (c *Client) traceRequest(ctx context.Context, h http.Header, rec *latency.Record) (end func()) {
	at := func(ns int64) time.Time { return c.epoch.Add(time.Duration(ns)) }
	op := c.target.genAIOperation()
	sctx, sp := c.tracer.Start(ctx, tracing.SpanName(op, c.target.Model), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(at(c.now())), trace.WithAttributes(attribute.String("tokentrace.request_id", rec.ID),
			attribute.String(tracing.AttrOperation, op), attribute.String(tracing.AttrProvider, genAIProvider),
			attribute.String(tracing.AttrRequestModel, c.target.Model)))
	tracing.Inject(sctx, h)
	rec.TraceID = sp.SpanContext().TraceID().String()
	return func() {
		sp.SetAttributes(attribute.Int("http.response.status_code", rec.Status), attribute.Int("gen_ai.usage.output_tokens", rec.OutputTokens))
		if ttft, ok := rec.TTFT(); ok {
			sp.SetAttributes(attribute.Float64("tokentrace.ttft", ttft.Seconds()))
		}
		if !rec.OK() {
			sp.SetStatus(codes.Error, string(rec.ErrorKind))
		}
		wrote := rec.WroteNS
		if wrote == 0 {
			wrote = rec.SentNS + rec.ConnectNS
		}
		tracing.StageSpans(sctx, c.tracer, at(rec.SentNS), []tracing.Stage{
			{Name: latency.Qualify(latency.HopClient, string(latency.StageConnect)), D: time.Duration(rec.ConnectNS)},
			{Name: latency.Qualify(latency.HopClient, string(latency.StageSend)), D: time.Duration(wrote - rec.SentNS - rec.ConnectNS)},
		})
		end := rec.EndNS
		if end == 0 {
			end = c.now()
		}
		sp.End(trace.WithTimestamp(at(end)))
	}
}

// setHeaders sets the request's headers: content type, the request id
// and a fresh trace context, then the target's credentials and headers.
func (c *Client) setHeaders(h http.Header, rec *latency.Record) {
	h.Set("Content-Type", "application/json")
	if c.target.Stream {
		h.Set("Accept", "text/event-stream")
	}
	h.Set("X-Request-Id", rec.ID)
	tp := traceparent()
	rec.TraceID = tp[3:35]
	h.Set("Traceparent", tp)
	c.target.authorize(h)
}

// authorize sets the target's credentials and its own headers on h.
func (t *Target) authorize(h http.Header) {
	if t.APIKey != "" {
		h.Set("Authorization", "Bearer "+t.APIKey)
	}
	for k, vs := range t.Headers {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
}

// newRequest is a request to the target's URL u with its credentials and
// headers.
func (t Target) newRequest(ctx context.Context, method, u string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	t.authorize(req.Header)
	return req, nil
}

// readResponse reads the answer into rec: an error status with its
// message, a stream event by event, or a whole body; then the server's
// split of a successful answer.
func (c *Client) readResponse(ctx context.Context, rec *latency.Record, req *workload.Request, resp *http.Response, body io.Reader, arrival func() int64) {
	rec.Status = resp.StatusCode
	if id := resp.Header.Get("X-Request-Id"); id != "" && id != rec.ID {
		rec.ServerID = id
	}
	if resp.StatusCode >= 400 {
		failStatus(rec, resp, body)
		return
	}
	var final string
	if c.target.Stream && streamType(c.target.api(), resp.Header.Get("Content-Type")) {
		final = c.readStream(ctx, rec, req, body, arrival)
	} else {
		c.readBody(ctx, rec, req, body, arrival)
	}
	if rec.OK() {
		asked := req.InputTokens
		if req.Requested > 0 {
			asked = req.Requested
		}
		if asked != rec.InputTokens {
			rec.InputTokensRequested = asked
		}
		v := latency.TimingValues{Header: resp.Header.Values("Server-Timing"), Trailer: resp.Trailer.Values("Server-Timing")}
		if final != "" {
			v.Final = []string{final}
		}
		serverTiming(rec, v)
		if rec.Server == nil {
			// TGI's timing headers, on a whole answer.
			rec.Server = latency.SplitFromTGIHeaders(resp.Header.Get)
		}
	}
}

// streamType reports whether an answer of this content type is api's
// stream: server-sent events, or for Ollama's native API NDJSON.
func streamType(api openai.API, ct string) bool {
	if api.NDJSON() {
		return strings.HasPrefix(ct, "application/x-ndjson")
	}
	return strings.HasPrefix(ct, "text/event-stream")
}

// appendBody builds the request JSON without reflection.
func (c *Client) appendBody(b []byte, req *workload.Request) []byte {
	t := &c.target
	if t.api() == openai.APISGLang {
		return c.appendSGLangBody(b, req)
	}
	b = append(b, `{"model":`...)
	b = openai.AppendString(b, t.Model)
	if api := t.api(); api != openai.APIChat && api != openai.APICompletions {
		return c.appendAPIBody(b, api, req)
	}
	if t.Endpoint == EndpointCompletions {
		b = append(b, `,"prompt":`...)
		b = openai.AppendString(b, promptText(req))
	} else {
		b = append(b, `,"messages":[`...)
		msgs := req.Messages
		if msgs == nil {
			b = append(b, `{"role":"user","content":`...)
			b = openai.AppendString(b, req.Prompt)
			b = append(b, '}')
		}
		for i, m := range msgs {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"role":`...)
			b = openai.AppendString(b, m.Role)
			b = append(b, `,"content":`...)
			b = openai.AppendString(b, m.Content)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	maxTokens := int64(max(req.MaxTokens, 1))
	b = append(b, `,"max_tokens":`...)
	b = strconv.AppendInt(b, maxTokens, 10)
	b = t.appendExtensions(b, maxTokens)
	if t.Stream {
		b = append(b, `,"stream":true,"stream_options":{"include_usage":true`...)
		if t.ContinuousUsage {
			b = append(b, `,"continuous_usage_stats":true`...)
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendExtensions appends the fields beyond the API's own that the
// target asks for: min_tokens, ignore_eos (vLLM, SGLang) and the metrics
// field (MetricsField).
func (t *Target) appendExtensions(b []byte, maxTokens int64) []byte {
	if t.MinTokens {
		b = append(b, `,"min_tokens":`...)
		b = strconv.AppendInt(b, maxTokens, 10)
	}
	if t.IgnoreEOS {
		b = append(b, `,"ignore_eos":true`...)
	}
	if t.MetricsField != "" {
		b = append(b, `,"`...)
		b = append(b, t.MetricsField...)
		b = append(b, `":true`...)
	}
	return b
}

// traceparent makes a W3C trace context header with fresh random ids.
func traceparent() string {
	var id [24]byte
	for i := 0; i < 24; i += 8 {
		v := rand.Uint64()
		for j := range 8 {
			id[i+j] = byte(v >> (8 * j))
		}
	}
	var b [55]byte
	copy(b[:], "00-")
	hex.Encode(b[3:35], id[:16])
	b[35] = '-'
	hex.Encode(b[36:52], id[16:])
	copy(b[52:], "-01")
	return string(b[:])
}

// silenceWatch fails a request that receives nothing for d, from the send
// or since its last byte. A read that brings bytes only stamps the instant
// (a monotonic clock reading and an atomic store): one timer, armed for the
// earliest instant the silence could run out, reads the stamp when it fires
// and either cancels or re-arms for the rest.
type silenceWatch struct {
	d      time.Duration
	start  time.Time
	last   atomic.Int64 // time since start of the latest byte
	cancel func()

	rd watchedReader

	mu      sync.Mutex // orders fire against stop
	t       *time.Timer
	stopped bool
}

func newSilenceWatch(d time.Duration, cancel func()) *silenceWatch {
	w := &silenceWatch{d: d, start: time.Now(), cancel: cancel}
	w.mu.Lock()
	w.t = time.AfterFunc(d, w.fire)
	w.mu.Unlock()
	return w
}

func (w *silenceWatch) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	idle := time.Since(w.start) - time.Duration(w.last.Load())
	if idle >= w.d {
		w.cancel()
		return
	}
	w.t.Reset(w.d - idle)
}

// stop disarms the watch for good.
func (w *silenceWatch) stop() {
	w.mu.Lock()
	w.stopped = true
	w.t.Stop()
	w.mu.Unlock()
}

// body wraps r so that every read bringing bytes pushes the silence back.
func (w *silenceWatch) body(r io.Reader) io.Reader {
	w.rd = watchedReader{r: r, w: w}
	return &w.rd
}

type watchedReader struct {
	r io.Reader
	w *silenceWatch
}

func (b *watchedReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if n > 0 {
		b.w.last.Store(int64(time.Since(b.w.start)))
	}
	return n, err
}

func fail(rec *latency.Record, kind latency.ErrorKind, msg string) {
	if rec.ErrorKind == "" {
		rec.ErrorKind, rec.Error = kind, msg
	}
}

// failTransport classifies an error of the round trip or of reading the body.
func (c *Client) failTransport(ctx context.Context, rec *latency.Record, err error) {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errSilence):
		fail(rec, latency.FailTimeout, fmt.Sprintf("no bytes for %s (--timeout)", c.timeout))
		return
	case cause != nil:
		fail(rec, latency.FailCanceled, "the run stopped while the request was in flight")
		return
	}
	var op *net.OpError
	var dns *net.DNSError
	switch {
	case errors.As(err, &dns):
		fail(rec, latency.FailConnect, err.Error())
	case errors.As(err, &op) && op.Op == "dial":
		fail(rec, latency.FailConnect, err.Error())
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		fail(rec, latency.FailReset, err.Error())
	case rec.FirstByteNS != 0:
		fail(rec, latency.FailReset, err.Error())
	default:
		fail(rec, latency.FailConnect, err.Error())
	}
}

// failStatus records an HTTP error status with the server's message.
func failStatus(rec *latency.Record, resp *http.Response, body io.Reader) {
	kind := latency.FailHTTP4xx
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		kind = latency.FailRateLimited
	case resp.StatusCode >= 500:
		kind = latency.FailHTTP5xx
	}
	b, _ := io.ReadAll(io.LimitReader(body, 8<<10))
	msg := strings.TrimSpace(string(b))
	var e openai.ErrorBody
	if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
		msg = e.Error.Message
		if e.Error.Type != "" {
			msg = e.Error.Type + ": " + msg
		}
	}
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	fail(rec, kind, fmt.Sprintf("%s: %s", resp.Status, msg))
}

// readStream reads an SSE response into rec, and returns the Server-Timing
// value of its final comment, if any.
func (c *Client) readStream(ctx context.Context, rec *latency.Record, req *workload.Request, body io.Reader, arrival func() int64) (final string) {
	rd, _ := c.readers.Get().(*sse.Reader)
	if rd == nil {
		rd = new(sse.Reader)
		rd.InitBuffer(body, arrival, 0, make([]byte, 0, streamReadBuffer))
		rd.KeepComment = latency.FinalTimingComment
		if c.target.api().NDJSON() {
			rd.Lines()
		}
	} else {
		rd.Reset(body, arrival)
	}
	defer func() {
		if len(rd.Kept) > 0 {
			final = string(rd.Kept)
		}
		rd.Reset(nil, nil)
		c.readers.Put(rd)
	}()
	// Room for the answer's events up to chunkRoom; a longer one grows it.
	if n := min(max(req.MaxTokens, 1), chunkRoom); cap(rec.ChunkNS) < n {
		rec.ChunkNS = make([]int64, 0, n)
		if c.target.ContinuousUsage {
			rec.ChunkTokens = make([]int32, 0, n)
		}
	}
	st := streamState{api: c.target.api(), answerID: c.target.AnswerID}
	onFirst := firstTokenHook(ctx)
	for {
		ev, err := rd.Next()
		if err != nil {
			if err == io.EOF {
				fail(rec, latency.FailStreamCut, "the stream ended without [DONE]")
			} else {
				c.failTransport(ctx, rec, err)
			}
			st.finish(rec, req)
			return
		}
		if string(ev.Data) == "[DONE]" {
			rec.EndNS = ev.At
			break
		}
		if len(ev.Name) > 0 && string(ev.Name) == "error" {
			fail(rec, latency.FailServer, "error event: "+truncate(string(ev.Data)))
			st.finish(rec, req)
			return
		}
		if err := st.event(rec, ev.Data, ev.At); err != nil {
			fail(rec, err.kind, err.msg)
			st.finish(rec, req)
			return
		}
		if onFirst != nil && (rec.FirstTokenNS != 0 || rec.FirstReasonNS != 0) {
			onFirst()
			onFirst = nil
		}
		if st.ended { // the typed and native APIs' [DONE]
			rec.EndNS = ev.At
			break
		}
	}
	// Drain to the end for the Server-Timing trailer (bounded by the
	// silence timer). The answer is complete: a broken tail does not fail
	// it, so the error is not kept.
	_, _ = io.Copy(io.Discard, body)
	st.finish(rec, req)
	if st.choices == 0 && rec.OK() {
		fail(rec, latency.FailInvalidEvent, "the stream carried no choices")
	}
	return final // set by the deferred function
}

// readBody reads a non-streaming response into rec.
func (c *Client) readBody(ctx context.Context, rec *latency.Record, req *workload.Request, body io.Reader, arrival func() int64) {
	tb := &stampReader{r: body, now: arrival}
	b, err := io.ReadAll(io.LimitReader(tb, 256<<20))
	if err != nil {
		c.failTransport(ctx, rec, err)
		return
	}
	rec.EndNS = tb.last
	if rec.EndNS == 0 {
		rec.EndNS = c.now()
	}
	rec.LastEventNS = rec.EndNS
	st := streamState{api: c.target.api(), answerID: c.target.AnswerID}
	if err := st.whole(rec, b); err != nil {
		fail(rec, err.kind, err.msg)
		return
	}
	st.finish(rec, req)
	if rec.OutputTokens > 0 {
		rec.FirstTokenNS = rec.EndNS
		rec.ChunkNS = []int64{rec.EndNS}
		rec.ChunkTokens = []int32{int32(rec.OutputTokens)}
	}
}

// stampReader notes the instant of the last read that brought bytes.
type stampReader struct {
	r    io.Reader
	now  func() int64
	last int64
}

func (s *stampReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.last = s.now()
	}
	return n, err
}

func truncate(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// stampConn notes the instant of every read from the connection that
// brought bytes: the moment they left the kernel for this process. An
// HTTP/1.1 response's body is read only by the goroutine reading the
// response, so when a body Read returns bytes, the connection's latest read
// is the one that brought them, even when they waited in a buffer (the
// first chunk often arrives with the headers, read by the transport's
// goroutine before the response is handed over).
type stampConn struct {
	net.Conn
	now  func() int64
	last atomic.Int64
}

func (c *stampConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.last.Store(c.now())
	}
	return n, err
}

// arrivalClock returns the arrival stamp of a connection's bytes, or nil
// where it cannot be trusted (HTTP/2 multiplexes streams on a connection).
func arrivalClock(conn net.Conn) func() int64 {
	if tc, ok := conn.(*tls.Conn); ok {
		if tc.ConnectionState().NegotiatedProtocol == "h2" {
			return nil
		}
		conn = tc.NetConn()
	}
	if sc, ok := conn.(*stampConn); ok {
		return func() int64 {
			if t := sc.last.Load(); t != 0 {
				return t
			}
			return sc.now()
		}
	}
	return nil
}
