package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/sse"
)

// modelsPath is the one path the gateway answers itself; the APIs'
// paths are openai.API's, and other paths under /v1/ are passed through
// (passThrough).
const modelsPath = "/v1/models"

// headerRequestID carries the request id, the client's or the gateway's.
const headerRequestID = "X-Request-Id"

// ServeHTTP routes the OpenAI-compatible endpoints, /health and /metrics.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.init()
	clearWriteDeadline(w)
	if api, ok := openai.APIOfPath(r.URL.Path); ok {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			openai.WriteErrorAs(w, api, http.StatusMethodNotAllowed, openai.NewError(openai.TypeInvalidRequest, "use POST", "", "method_not_allowed"), 0)
			return
		}
		g.complete(w, r, api)
		return
	}
	switch r.URL.Path {
	case modelsPath:
		g.models(w, r)
	case "/health", "/metrics", UpstreamMetricsPath:
		if g.adminApart.Load() { // served on the admin listener only
			openai.WriteError(w, http.StatusNotFound, openai.NewError(openai.TypeNotFound, "unknown path "+r.URL.Path, "", "not_found"), 0)
			return
		}
		g.admin(w, r)
	default:
		if (strings.HasPrefix(r.URL.Path, "/v1/") || engineTokenizerPaths[r.URL.Path]) && g.passesUnknown() {
			g.passThrough(w, r)
			return
		}
		openai.WriteError(w, http.StatusNotFound, openai.NewError(openai.TypeNotFound, "unknown path "+r.URL.Path, "", "not_found"), 0)
	}
}

// engineTokenizerPaths are the engine's own tokenizer endpoints outside
// /v1/ (llama.cpp's /tokenize, /detokenize and /apply-template; vLLM's
// /tokenize, /detokenize), passed through as paths under /v1/ are, so that
// a client sizes its prompts behind the gateway as it does directly.
// llama.cpp's /props (its slots, which its /metrics does not give) and
// TensorRT-LLM's /perf_metrics (its per-request records, joined by bench
// after a run) and /steady_clock_offset (the clock of their instants, by
// which bench joins whole answers) pass the same way.
var engineTokenizerPaths = map[string]bool{"/tokenize": true, "/detokenize": true, "/apply-template": true, "/props": true,
	"/perf_metrics": true, "/steady_clock_offset": true}

// visibleASCII reports whether s is printable ASCII without spaces (a
// client's request id is passed on, logged and echoed only then).
func visibleASCII(s string) bool {
	for i := range len(s) {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func newIDPrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "gw-" + hex.EncodeToString(b[:]) + "-"
}

func (g *Gateway) requestID(r *http.Request) string {
	if id := r.Header.Get(headerRequestID); id != "" && len(id) <= 128 && visibleASCII(id) {
		return id
	}
	return g.idPrefix + strconv.FormatUint(g.idSeq.Add(1), 10)
}

// exchange is one request's state inside the gateway. What a stream
// touches of it on every event after the first token lies on three
// cache lines: g, eventState, the writer of the answer's events (swv)
// and the timeline's stage clocks, from byte 56 on. The allocator puts
// an exchange (a size class of 64-byte multiples, with an 8-byte header
// before the object) 8 bytes past a line, so byte 56 starts one; the
// fields before it are the request's. Beyond these an event touches the
// head of rel and the winning attempt's reading state (attemptBuf's
// first lines); the rest is read once a request (TestEventStateLayout).
type exchange struct {
	w   http.ResponseWriter
	r   *http.Request
	rt  *liveConfig // the configuration the request started with
	id  string
	api openai.API
	g   *Gateway
	eventState
	swv    sse.Writer // the answer's events, from newRelay on
	tl     timeline
	req    Request
	body   []byte
	route  *RouteConfig
	pool   *pool
	key    *keyState
	status int
	span   spanRecorder
	// vals holds the values of the headers the gateway sets on each
	// request (valID…): each header's value slice points into it, so
	// setting one allocates nothing.
	vals      [valCount]string
	fields    map[string]any // body fields the policies change (setField)
	noContent bool           // the stream ended without content (no first token: no TTFT)
	wrote     bool
	charged   bool // the key's limiter charged chargedTokens (keyLimits, settleTokens)
	// firstSeen is when the first token was taken (firstToken); fed
	// (eventState), that the pool and the span were told
	// (feedFirstToken).
	firstSeen time.Time
	errKind   string
	prio      int       // priority class in the queues (queuePriority)
	deadline  time.Time // TTFT deadline (ttftDeadline); zero: none
	// engineSplit is the upstream's queue, prefill and decode time from
	// its engine's own per-request evidence (noteEvidence, evidence.go),
	// used when no Server-Timing gives them.
	engineSplit *latency.ServerSplit
	att         attempts // forward's tries (kept here: no allocation of their own)
	rel         relay    // the answer's relay (newRelay), likewise
	// chunks holds chunkNS and chunkTokens for the usual answer, pooled
	// (chunkStore); nil until the first content event.
	chunks *chunkBuf
	// sendG bounds the answer's writes to the client (stream on); sendQ
	// carries a streamed answer's writes to it (queueSends).
	sendG sendGuard
	sendQ sendQueue
	// dequeued: the request's pool slots were given back (dequeue).
	dequeued      atomic.Bool
	chargedTokens int32 // in the padding after dequeued
	// promptTokens is the upstream's usage.prompt_tokens, the engine's
	// count of the input (noteEvidence); 0 when it reported none.
	promptTokens int32
	// firstAnswer is when the first answer token (content, not
	// reasoning) was read from upstream: after the first token when the
	// output began with reasoning; zero when none came or the answer was
	// whole.
	firstAnswer time.Time
}

// eventState is what relaying one event reads and writes of the
// exchange's own state, gathered in one struct behind the exchange's g
// (two cache lines with it): the winning attempt's reading state, the
// relay's instants, the output token count, the chunks' instants and
// counts, and the stream's flags.
type eventState struct {
	// rs is the winning attempt's reading state (its attemptBuf): the
	// event reader, the timed upstream body under it and the classifier.
	rs *attemptBuf
	// relayStart and lastWrite are instants on the gateway's monotonic
	// scale (Gateway.sinceBase): the timeline's start, and when the last
	// write to the client ended.
	relayStart, lastWrite time.Duration
	tokens                int // output tokens
	// chunkNS is the instant (ns since start) of every content event read
	// from upstream, the first token's first; chunkTokens, only while the
	// upstream sends continuous usage, the output tokens each carried
	// (latency.Record's ChunkNS and ChunkTokens).
	chunkNS     []int64
	chunkTokens []int32
	// fed: the pool and the span were told of the first token
	// (feedFirstToken). continuous: every content event carries usage
	// (continuous usage). ending: the final usage chunk (usage, no
	// choices) was passed on; only [DONE] may follow, within
	// streamEndGrace.
	fed, continuous, ending bool
}

// chunkBuf is an exchange's storage for chunkNS and chunkTokens for the
// usual answer (64 content events; a longer one grows out of it). Taken
// from chunkBufs at the first content event and given back by finish once
// the metrics have read them: nothing else reads them, and nothing after
// finish (the attempt's timer reads none).
type chunkBuf struct {
	ns  [64]int64
	tok [64]int32
}

var chunkBufs = sync.Pool{New: func() any { return new(chunkBuf) }}

// chunkStore is the exchange's chunkBuf, taken from the pool on first use.
func (x *exchange) chunkStore() *chunkBuf {
	if x.chunks == nil {
		x.chunks = chunkBufs.Get().(*chunkBuf)
	}
	return x.chunks
}

// releaseChunks gives the exchange's chunkBuf back; chunkNS and
// chunkTokens are forgotten with it.
func (x *exchange) releaseChunks() {
	if x.chunks == nil {
		return
	}
	x.chunkNS, x.chunkTokens = nil, nil
	chunkBufs.Put(x.chunks)
	x.chunks = nil
}

// The headers whose values exchange.vals holds.
const (
	valID          = iota // X-Request-Id, to the client and upstream
	valContentType        // the upstream request's Content-Type
	valTiming             // the Server-Timing header
	valTrailer            // the Server-Timing trailer
	valCount
)

// trailerTimingKey is the Server-Timing trailer's key in a response's header
// map (net/http's http.TrailerPrefix form).
const trailerTimingKey = http.TrailerPrefix + "Server-Timing"

// headerValue stores v in the exchange and returns it as a header's value
// slice (capacity 1: an append to it copies).
func (x *exchange) headerValue(i int, v string) []string {
	x.vals[i] = v
	return x.vals[i : i+1 : i+1]
}

// fail answers with an OpenAI-shaped error (if nothing was written yet).
func (x *exchange) fail(status int, typ, msg, param, code string, retryAfter time.Duration) {
	x.status = status
	x.errKind = code
	if x.wrote {
		return
	}
	x.wrote = true
	ra := 0
	if retryAfter > 0 || status == http.StatusTooManyRequests {
		ra = int((retryAfter + time.Second - 1) / time.Second)
		ra = max(ra, 1)
	}
	openai.WriteErrorAs(x.w, x.api, status, openai.NewError(typ, msg, param, code), ra)
}

// complete serves one completion request: the inbound policies, the
// pool's queue, then the attempts and the answer (forward).
func (g *Gateway) complete(w http.ResponseWriter, r *http.Request, api openai.API) {
	x := &exchange{g: g, w: w, r: r, api: api}
	x.tl.start = g.now()
	x.id = g.requestID(r)
	w.Header()[headerRequestID] = x.headerValue(valID, x.id)
	x.vals[valContentType] = "application/json"
	ctx, span := g.startSpan(r, x.id)
	x.span = span
	defer x.finish()

	x.rt = g.rt.Load()
	if x.rt == nil {
		x.fail(http.StatusServiceUnavailable, openai.TypeServer, "the gateway has no upstreams configured", "", "no_upstreams", 0)
		return
	}
	if !x.admitInbound() {
		return
	}
	if tot := x.route.Timeouts.Total.D(); tot > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, tot)
		defer cancel()
	}
	// Without a total timeout the request's context is the client's: each
	// attempt cancels its own upstream request when it ends.
	if !x.queue(ctx) {
		return
	}
	defer x.dequeue()
	if x.route.PrefillPool != "" && !x.prefillHalf(ctx) {
		return
	}
	x.forward(ctx)
}

// queue waits for the request's admission to its pool (priority, deadline
// and the route's early rejection); dequeue gives the slot back. false
// when the request was refused or cancelled while queued (answered).
func (x *exchange) queue(ctx context.Context) bool {
	g := x.g
	x.tl.in = g.now()
	x.span.event("queued")
	admitted, err := x.pool.adm.acquire(ctx, g.clock, x.prio, x.deadline, x.route.EarlyReject)
	if err != nil {
		var ae *admitError
		if errors.As(err, &ae) {
			x.refuse(queueRejection(ae))
			return false
		}
		if x.r.Context().Err() == nil { // the route's total timeout, the client still there
			x.fail(http.StatusGatewayTimeout, openai.TypeServer, "total timeout expired while queued", "", "timeout", 0)
			return false
		}
		x.fail(statusClientClosed, openai.TypeServer, "request cancelled while queued", "", "cancelled", 0)
		return false
	}
	x.tl.admitted = admitted
	x.span.event("admitted")
	return true
}

// dequeue gives back the slot queue took in the request's pool and those
// a fallback took in its own (attempts.release), once: when the upstream's
// answer ends, not when the client has read it (the relay, cutClient), or
// at the request's end.
func (x *exchange) dequeue() {
	if !x.dequeued.CompareAndSwap(false, true) {
		return
	}
	now := x.g.now()
	x.pool.adm.release(now, now.Sub(x.tl.admitted), true)
	for _, r := range x.att.release {
		r()
	}
}

// queueRejection is a queue's refusal: 429 queue_full, 429 deadline (its
// predicted wait, or its wait, broke the request's deadline), or 503
// admission_unavailable (a shared pool's Redis is unreachable under
// fail_closed), with the wait it suggests as Retry-After.
func queueRejection(ae *admitError) *rejection {
	switch {
	case errors.Is(ae, errSharedUnavailable):
		return shed("admission_unavailable", http.StatusServiceUnavailable, openai.TypeServer, ae.Error(), ae.retryAfter)
	case errors.Is(ae, errQueueFull):
		return shed("queue_full", http.StatusTooManyRequests, openai.TypeRateLimit, ae.Error(), ae.retryAfter)
	}
	return shed("deadline", http.StatusTooManyRequests, openai.TypeRateLimit, ae.Error(), ae.retryAfter)
}

// finish records metrics and ends the span, then gives the chunk
// instants' storage back (releaseChunks).
func (x *exchange) finish() {
	if x.tl.end.IsZero() {
		x.tl.end = x.g.now()
	}
	st := x.tl.stages()
	var ttft time.Duration
	if !x.tl.firstTok.IsZero() {
		ttft = x.tl.firstTok.Sub(x.tl.start)
	}
	pool, model := "", ""
	if x.pool != nil {
		pool = x.pool.name
	}
	if x.route != nil {
		model = x.route.Model
	}
	if x.status == 0 {
		x.status = http.StatusOK
	}
	x.g.Metrics.observe(&observation{pool: pool, model: model, status: x.status, stream: x.req.Stream, stages: st, tl: &x.tl,
		ttft: ttft, firstAnswer: x.firstAnswer, noContent: x.noContent, outTokens: x.tokens, inTokens: x.req.InputTokens(), chunkNS: x.chunkNS, chunkTokens: x.chunkTokens})
	if x.g.Live != nil {
		x.offerLive(st, ttft, pool)
	}
	x.span.end(x, st)
	x.settleTokens()
	x.releaseChunks()
}
