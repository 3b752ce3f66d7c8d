package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/redact"
	"github.com/tokentrace/tokentrace/internal/sse"
	"github.com/tokentrace/tokentrace/internal/staleconn"
)

// attempt is one upstream try: a replica of a pool, and what was read from
// it up to the first content token (the upstream I/O of one try; forward
// runs the tries).
type attempt struct {
	pool *pool
	// admitted is when the request was admitted to pool: its upstream
	// TTFT, which feeds pool's adaptive limit, counts from there.
	admitted time.Time
	rep      *Replica
	cancel   context.CancelFunc // ends the attempt's upstream request
	started  time.Time
	// gotConn is when the connection was obtained, in ns after started;
	// conns counts the connections (none yet: gotConn is unset; more than
	// one: the request was resent, its pooled connection stale). trace is
	// the upstream request's trace, whose GotConn sets them.
	gotConn atomic.Int64
	conns   atomic.Int32
	trace   httptrace.ClientTrace
	now     func() time.Time // the gateway's clock
	// timer is the attempt's one timer (fire): its TTFT timeout, then,
	// once its answer is relayed, relay's idle timeout and end grace
	// (relay.arm); nil until either needs it.
	timer *time.Timer
	relay atomic.Pointer[relay] // set by relay.arm
	resp  *http.Response
	rd    *sse.Reader // &buf.rd, over buf.up, when the answer is a stream; else nil
	// buf holds the event reader with its buffers and pending's
	// (attemptBuf), taken from a pool by launch and given back by
	// attempts.stop.
	buf     *attemptBuf
	pending []byte // stream bytes read up to and including the first content event
	body    []byte // non-streaming body
	// askedMetrics: the gateway, not the client, asked the replica for
	// its metrics object (askEngine); askedUsage: for a stream's final
	// usage chunk too. What they bring is read and not passed on.
	askedMetrics, askedUsage bool
	// wholeTokens is the non-streaming body's usage.completion_tokens;
	// scanned, the time reading it took.
	wholeTokens int
	wholeInfo   openai.ChunkInfo // the body read as a chunk: the engine's evidence
	scanned     time.Duration
	first       time.Time
	answered    bool // the first output was answer text, not reasoning
	done        bool // the stream ended ([DONE]) before any content
	doneAt      int  // with done: where the [DONE] event starts in pending
	// outcome
	err     error
	phase   atomic.Int32 // an attemptPhase
	status  int          // upstream status when it answered with an error
	errBody []byte
	tokens  int // output tokens counted in pending
	lastUse int // completion_tokens of the last usage seen

	ttftTimeout time.Duration // 0: none
	idleTimeout time.Duration // between data events after the first token; 0: none
	whole       bool          // the answer is one body, not an event stream
}

// attemptBuf is an attempt's reading state: the event reader with its
// initial buffer (sse.Reader's usual size) and its event data buffer, the
// upstream's body under it, timed (up), the classifier of its events (the
// winner's relay goes on with it after the first token), and the buffer
// that holds the stream's bytes up to the first token (pending: a role
// chunk and the first token, usually). The reader, up and the classifier
// come first, in that order: what the relay touches on every event, on
// adjacent cache lines (TestEventStateLayout). They are most of an
// attempt's bytes, which the gateway would otherwise allocate, clear and
// collect on every request, so they are pooled (attemptBufs): launch
// takes one per attempt and attempts.stop gives every one back once no
// attempt reads any more — after their
// results were all received, the answer relayed or the error answered.
// Nothing that outlives the request points into them: the attempt's timer
// (fire) reads none, an upstream's error body and the events before the
// first token are written to the client before stop, and what the
// metrics and the span keep is parsed or copied out.
type attemptBuf struct {
	rd    sse.Reader
	up    waitReader
	probe chunkProbe
	used  bool // rd was set up (reader): Reset keeps its buffers
	lines bool // rd reads lines (NDJSON), not events
	rdBuf [2048]byte
	pend  [512]byte
}

// maxPooledData bounds the event data buffer a pooled reader keeps: one
// that grew past it (a long event) is dropped with its reader's state.
const maxPooledData = 4 << 10

// reader sets up b's event reader on r, timed by g's clock (up): reset,
// keeping its buffers, when it already served an attempt and they are
// still the usual size, else made anew over rdBuf.
func (b *attemptBuf) reader(r io.Reader, g *Gateway, lines bool) *sse.Reader {
	b.up = waitReader{r: r, g: g}
	if b.used && b.lines == lines && b.rd.BufferCap() <= len(b.rdBuf) && b.rd.DataCap() <= maxPooledData {
		b.rd.Reset(&b.up, nil)
		return &b.rd
	}
	initEventReader(&b.rd, &b.up, b.rdBuf[:])
	if lines {
		b.rd.Lines()
	}
	b.used, b.lines = true, lines
	return &b.rd
}

var attemptBufs = sync.Pool{New: func() any { return new(attemptBuf) }}

// attemptPhase is where an attempt stands in the race between its reader
// and its TTFT timer; whichever moves it out of awaitingFirstToken first
// (compare-and-swap) wins.
type attemptPhase int32

const (
	awaitingFirstToken attemptPhase = iota // reading the upstream, no first token yet
	firstTokenClaimed                      // the reader got the first token before the timer fired
	ttftExpired                            // the timer fired first: the attempt is cancelled
)

// move takes the attempt from awaitingFirstToken to next; false when the
// other side already moved it.
func (a *attempt) move(next attemptPhase) bool {
	return a.phase.CompareAndSwap(int32(awaitingFirstToken), int32(next))
}

// timedOut reports whether the TTFT timeout fired before the first token.
func (a *attempt) timedOut() bool { return attemptPhase(a.phase.Load()) == ttftExpired }

// claimFirst marks the first token as arrived; false (and the attempt
// failed) when the TTFT timeout won the race.
func (a *attempt) claimFirst() bool {
	if a.move(firstTokenClaimed) {
		return true
	}
	a.err = errors.New("ttft timeout")
	return false
}

// won reports whether the attempt produced a first token (or a whole
// answer), to be streamed.
func (a *attempt) won() bool { return a.err == nil && a.status == 0 }

// retryable reports whether another replica may succeed where a failed.
// An answer over the size bound is not retried: another replica would
// most likely send as much.
func (a *attempt) retryable() bool {
	var tl *tooLargeError
	if errors.As(a.err, &tl) {
		return false
	}
	return a.err != nil || a.status >= 500 || a.status == http.StatusTooManyRequests
}

// overloaded reports whether a failed on a sign of upstream overload: a
// 429 or 503 answer, or the TTFT timeout.
func (a *attempt) overloaded() bool {
	return a.timedOut() || a.status == http.StatusTooManyRequests || a.status == http.StatusServiceUnavailable
}

// release gives back what a won attempt holds when it is not streamed
// (it lost a race it had won too late).
func (a *attempt) release() {
	_ = a.resp.Body.Close()
	a.rep.outstanding.Add(-1)
	a.cancel()
}

// run performs one attempt up to the first content token (or the whole
// body when not streaming). It returns a with its outcome set.
func (x *exchange) run(ctx context.Context, a *attempt, body []byte) *attempt {
	g := x.g
	a.rep.outstanding.Add(1)
	a.started = g.now()
	if d := a.ttftTimeout; d > 0 {
		a.timer = time.AfterFunc(d, a.fire)
		defer a.timer.Stop()
	}
	ok := false
	defer func() {
		if !ok {
			a.rep.outstanding.Add(-1)
			if a.resp != nil {
				_ = a.resp.Body.Close()
			}
			a.cancel()
		}
	}()
	resp, err := x.send(ctx, a, body)
	if err != nil {
		a.err = err
		return a
	}
	a.resp = resp
	switch {
	case resp.StatusCode != http.StatusOK:
		a.status = resp.StatusCode
		a.errBody, _ = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return a
	case !x.req.Stream || !streamType(x.api, resp.Header.Get("Content-Type")):
		// Not streaming (or an upstream that answered a stream request
		// with one JSON body): the body is passed through whole.
		ok = x.readWhole(a)
	default:
		ok = x.readToFirstToken(a)
	}
	return a
}

// send makes the attempt's upstream request: the client's headers (less
// hop-by-hop ones and the gateway's key), the request id, the span's
// trace context and the replica's own credentials.
func (x *exchange) send(ctx context.Context, a *attempt, body []byte) (*http.Response, error) {
	g := x.g
	a.trace.GotConn = a.connected
	// One trace per request: the stale-connection transport's hooks and
	// these, without net/http's composition of two traces by reflection.
	ctx = staleconn.WithClientTrace(ctx, &a.trace)
	out, err := http.NewRequestWithContext(ctx, http.MethodPost, a.rep.cfg.URL+x.r.URL.Path, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build upstream request: %w", err)
	}
	copyRequestHeaders(out.Header, x.r.Header, x.r.RemoteAddr)
	// Values of the exchange's, shared by its attempts, which only read them.
	out.Header[headerRequestID] = x.vals[valID : valID+1 : valID+1]
	out.Header["Content-Type"] = x.vals[valContentType : valContentType+1 : valContentType+1]
	x.span.inject(out.Header)
	if x.key != nil {
		stripKeyed(out.Header)
	}
	if auth := a.rep.cfg.authorization(); auth != "" {
		out.Header.Set("Authorization", auth)
	}
	resp, err := g.transport.RoundTrip(out)
	if a.conns.Load() > 1 {
		g.countFault(a.pool, faultStaleConn)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", a.rep.cfg.URL, err)
	}
	return resp, nil
}

// fire runs when the attempt's timer fires: before the first token the
// TTFT timeout cancels the attempt; after it, the relay checks its idle
// timeout (or end grace).
func (a *attempt) fire() {
	if a.move(ttftExpired) {
		a.cancel()
		return
	}
	if r := a.relay.Load(); r != nil {
		r.idleCheck()
	}
}

// connected is the upstream request's GotConn hook: the instant the
// connection was obtained, and one more connection.
func (a *attempt) connected(httptrace.GotConnInfo) {
	a.gotConn.Store(int64(a.now().Sub(a.started)))
	a.conns.Add(1)
}

// connAt is when the connection was obtained; ok is false when none was.
func (a *attempt) connAt() (t time.Time, ok bool) {
	if a.conns.Load() == 0 {
		return time.Time{}, false
	}
	return a.started.Add(time.Duration(a.gotConn.Load())), true
}

// readWhole reads a non-streaming answer whole: its end is the attempt's
// "first token". The answer is read as a chunk is (its usage gives the
// token count); one that is not a JSON object is a protocol error, as an
// event would be. It reports whether the attempt won.
func (x *exchange) readWhole(a *attempt) bool {
	g := x.g
	a.whole = true
	var err error
	limit := x.rt.cfg.Server.MaxResponseBytes
	a.body, err = io.ReadAll(io.LimitReader(a.resp.Body, limit+1))
	if err != nil {
		a.err = fmt.Errorf("read upstream body: %w", err)
		return false
	}
	if int64(len(a.body)) > limit {
		// The deferred cancel in run closes the upstream's connection:
		// the rest of the answer is never read.
		a.body = nil
		a.err = &tooLargeError{limit: limit}
		g.countFault(a.pool, faultTooLarge)
		return false
	}
	a.first = g.now()
	a.wholeTokens, err = answerTokens(a.body, &a.wholeInfo)
	a.scanned = g.now().Sub(a.first)
	if err != nil {
		a.err = newProtocolError(a.body)
		g.countFault(a.pool, faultProtocol)
		return false
	}
	return a.claimFirst()
}

// readToFirstToken reads the upstream's events, keeping their bytes, up
// to the first that carries output (or [DONE]). An error event first is
// the upstream's error answer; an event that is not JSON, a protocol
// error. It reports whether the attempt won.
func (x *exchange) readToFirstToken(a *attempt) bool {
	g := x.g
	a.rd = a.buf.reader(a.resp.Body, g, x.api.NDJSON())
	a.pending = a.buf.pend[:0]
	probe := &a.buf.probe
	*probe = chunkProbe{}
	for {
		ev, err := a.rd.Next()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF // no [DONE]
			}
			a.err = fmt.Errorf("upstream stream before first token: %w", err)
			return false
		}
		start := len(a.pending)
		a.pending = append(a.pending, ev.Raw...)
		switch probe.inspect(ev) {
		case eventContent:
			a.first = g.now()
			a.answered = probe.answer()
			a.tokens, a.lastUse = 1, 0
			if used, ok := probe.usage(); ok {
				a.tokens, a.lastUse = used, used
			}
			return a.claimFirst()
		case eventDone:
			a.first = g.now()
			a.done, a.doneAt = true, start
			return a.claimFirst()
		case eventError:
			a.status = http.StatusBadGateway
			a.errBody = bytes.TrimSpace(ev.Data)
			x.upstreamErrorEvent(a, probe.Error)
			return false
		case eventInvalid:
			a.err = newProtocolError(ev.Raw)
			g.countFault(a.pool, faultProtocol)
			return false
		}
	}
}

// pickReplica asks the pool's balancer among replicas not yet tried (all of
// them when every one was).
func pickReplica(p *pool, req *Request, tried []*Replica) *Replica {
	c := p.replicas
	if len(tried) > 0 {
		var left []*Replica
		for _, r := range c {
			if !slices.Contains(tried, r) {
				left = append(left, r)
			}
		}
		if len(left) > 0 {
			c = left
		}
	}
	return p.balancer.Pick(req, c)
}

func (g *Gateway) countAttempt(p *pool, outcome string) {
	if g.Metrics != nil {
		g.Metrics.Attempts.WithLabelValues(p.name, outcome).Inc()
	}
}

// The kinds of tokentrace_gateway_upstream_errors_total.
const (
	faultProtocol    = "protocol_error"
	faultStreamBroke = "stream_broken"
	faultIdle        = "idle_timeout"
	faultTooLarge    = "response_too_large"
	faultStaleConn   = "stale_connection" // resent: its pooled connection had been closed
	faultErrorEvent  = "error_event"      // the upstream's stream carried an error event
)

// errorEventMax bounds the upstream's error message as it is logged.
const errorEventMax = 300

// upstreamErrorEvent logs and counts an error event of a's stream: its
// message (openai.ErrorText), without the replica's credentials and at
// most errorEventMax bytes.
func (x *exchange) upstreamErrorEvent(a *attempt, data []byte) {
	msg := redact.Values(redact.Text(openai.ErrorText(bytes.TrimSpace(data))), a.rep.cfg.credentials()...)
	if len(msg) > errorEventMax {
		msg = strings.ToValidUTF8(msg[:errorEventMax], "") + "…"
	}
	x.g.log().Warn("upstream error event", "request_id", x.id, "pool", a.pool.name, "replica", a.rep.cfg.URL, "message", msg)
	x.g.countFault(a.pool, faultErrorEvent)
}

// tooLargeError is a non-streamed answer larger than
// server.max_response_bytes.
type tooLargeError struct{ limit int64 }

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("the upstream's answer exceeds %d bytes (server.max_response_bytes)", e.limit)
}

func (g *Gateway) countFault(p *pool, kind string) {
	if g.Metrics != nil {
		g.Metrics.UpstreamErrors.WithLabelValues(p.name, kind).Inc()
	}
}

// protocolError is an upstream event (or a whole answer) the gateway
// cannot parse: its data is neither [DONE] nor a JSON object. Its Error,
// logged, quotes the start; the client is told protocolErrorMsg only (an
// upstream's error page can name internal hosts).
type protocolError struct{ excerpt string }

const protocolErrorMsg = "upstream protocol error: the upstream sent an event that is not JSON"

func newProtocolError(ev []byte) *protocolError {
	ev = bytes.TrimSpace(ev)
	if len(ev) > 64 {
		ev = ev[:64]
	}
	return &protocolError{excerpt: redact.Text(strconv.Quote(string(ev)))}
}

func (e *protocolError) Error() string { return protocolErrorMsg + ": " + e.excerpt }

// passError forwards an upstream's error answer (already OpenAI-shaped
// when the upstream is OpenAI-compatible) with its status.
func (x *exchange) passError(a *attempt) {
	if a.status >= 300 && a.status < 400 { // a redirect: not followed, not passed on
		x.fail(http.StatusBadGateway, openai.TypeServer, fmt.Sprintf("upstream answered %d, a redirect (not followed)", a.status), "", "upstream_redirect", 0)
		return
	}
	x.status = a.status
	x.errKind = "upstream_status"
	if x.wrote {
		return
	}
	x.wrote = true
	h := x.w.Header()
	ct := "application/json"
	if a.resp != nil && a.resp.Header.Get("Content-Type") != "" {
		ct = a.resp.Header.Get("Content-Type")
	}
	h.Set("Content-Type", ct)
	if a.resp != nil {
		if ra := a.resp.Header.Get("Retry-After"); ra != "" {
			h.Set("Retry-After", ra)
		}
	}
	// The upstream's words are passed on without credentials, in case
	// it quotes what it was sent.
	body := []byte(redact.Values(redact.Text(string(a.errBody)), a.rep.cfg.credentials()...))
	if len(bytes.TrimSpace(body)) == 0 || !json.Valid(body) {
		b, _ := json.Marshal(openai.ErrorBody{Error: openai.NewError(openai.TypeServer,
			fmt.Sprintf("upstream answered %d: %s", a.status, strings.TrimSpace(string(body))), "", "upstream_error")})
		body = b
	}
	x.w.WriteHeader(a.status)
	_, _ = x.w.Write(body)
}

// streamType reports whether an answer of this content type is api's
// stream: server-sent events, or for Ollama's native API NDJSON.
func streamType(api openai.API, ct string) bool {
	if api.NDJSON() {
		return strings.HasPrefix(ct, "application/x-ndjson")
	}
	return strings.HasPrefix(ct, "text/event-stream")
}
