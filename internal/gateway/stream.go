package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/redact"
	"github.com/tokentrace/tokentrace/internal/sse"
)

// maxEventBytes bounds one SSE event read from upstream.
const maxEventBytes = 16 << 20

// streamEndGrace is how long the gateway waits on the upstream once its
// answer has ended: after [DONE], for the rest of its body (the
// Server-Timing trailer); after the final usage chunk (no choices), for
// its [DONE]. Past it the upstream's connection is closed and the client's
// stream ends: an upstream that keeps the connection open after its
// answer never holds the client.
const streamEndGrace = 500 * time.Millisecond

// endGrace is streamEndGrace, or what a test set instead.
func (g *Gateway) endGrace() time.Duration {
	if g.endGraceTest > 0 {
		return g.endGraceTest
	}
	return streamEndGrace
}

// newEventReader reads an upstream's stream event by event, each with its
// raw bytes to pass on (internal/sse in block mode: LF, CRLF and lone CR
// line ends, keep-alive comments as events of their own).
func newEventReader(r io.Reader) *sse.Reader {
	rd := new(sse.Reader)
	initEventReader(rd, r, nil)
	return rd
}

// initEventReader sets up rd as newEventReader's, with buf's storage as
// its initial buffer (nil: one of its own).
func initEventReader(rd *sse.Reader, r io.Reader, buf []byte) {
	rd.InitBuffer(r, nil, maxEventBytes, buf)
	rd.Blocks()
}

type eventKind int

const (
	eventOther   eventKind = iota // role-only chunk, usage chunk, a JSON object of another shape
	eventContent                  // carries output: content, reasoning, text or tool calls
	eventDone                     // data: [DONE]
	eventError                    // data: {"error": ...}
	eventInvalid                  // a data payload that is neither [DONE] nor a JSON object
	eventNoData                   // comments or other fields only (a keep-alive)
)

// chunkProbe classifies the events of one stream and keeps what it read
// of the last one (the chunk classifier, openai.ScanChunk).
type chunkProbe struct {
	openai.ChunkInfo
}

var doneMarker = []byte("[DONE]")

// inspect classifies one SSE event by its data (its data lines joined, as
// SSE joins them). An event without data (comments, other fields) is
// eventNoData. A payload that is neither [DONE] nor a JSON object (nor
// valid JSON) is eventInvalid: an upstream protocol error. A JSON object
// of an unexpected shape is eventOther (forwarded untouched).
func (p *chunkProbe) inspect(ev sse.Event) eventKind {
	if !ev.HasData {
		p.ChunkInfo = openai.ChunkInfo{}
		return eventNoData
	}
	if bytes.Equal(bytes.TrimSpace(ev.Data), doneMarker) {
		p.ChunkInfo = openai.ChunkInfo{}
		return eventDone
	}
	if err := openai.ScanChunk(ev.Data, &p.ChunkInfo); err != nil {
		if errors.Is(err, openai.ErrChunkShape) {
			return eventOther
		}
		return eventInvalid
	}
	switch {
	case p.Error != nil:
		return eventError
	case p.Output:
		return eventContent
	case p.End:
		// Responses' response.completed, Messages' message_stop, Ollama's
		// done object: the [DONE] of the typed and native APIs.
		return eventDone
	}
	return eventOther
}

// answer reports whether the event classified last carries answer text
// (content or a completion's text), not only reasoning or a tool call.
func (p *chunkProbe) answer() bool { return len(p.Content) > 0 || len(p.Text) > 0 }

// usage is the completion_tokens of the chunk's usage; ok is false when
// it has none.
func (p *chunkProbe) usage() (completion int, ok bool) {
	return p.CompletionTokens, p.HasUsage && p.HasCompletion
}

// answerTokens reads a whole (non-streaming) answer with the chunk
// classifier into c (its metrics and timings are the engine's evidence):
// its usage.completion_tokens (0 without one); an error when it is not a
// JSON object (a JSON object of another shape is no error).
func answerTokens(body []byte, c *openai.ChunkInfo) (int, error) {
	if err := openai.ScanChunk(body, c); err != nil && !errors.Is(err, openai.ErrChunkShape) {
		return 0, err
	}
	if c.HasUsage && c.HasCompletion {
		return c.CompletionTokens, nil
	}
	return 0, nil
}

// stream sends the winning attempt's answer to the client: the events read
// so far, then each further event as it arrives, flushed one by one (or
// the whole answer). It returns true (a first token existed).
func (x *exchange) stream(ctx context.Context, a *attempt) bool {
	defer a.rep.outstanding.Add(-1)
	defer a.resp.Body.Close()
	defer a.cancel()
	x.firstToken(a)
	defer x.feedFirstToken(a) // when the answer did not (an answer sent whole, or without content)
	x.sendG.start(x.w, x.rt.cfg.Server.SendTimeout.D())
	defer x.sendG.end()
	// The total timeout (or the client's end) cuts a client that is not
	// reading, and gives the slots back at once.
	defer context.AfterFunc(ctx, x.cutClient)()
	r := x.newRelay(ctx, a)
	switch {
	case a.whole:
		r.whole()
	case a.done:
		r.empty()
	default:
		r.events()
	}
	return true
}

// firstToken sets the timeline's connection and first-token instants;
// feedFirstToken passes them on once the first events were written.
func (x *exchange) firstToken(a *attempt) {
	tl := &x.tl
	tl.conn = a.started
	if c, ok := a.connAt(); ok {
		tl.conn = c
	}
	if tl.conn.Before(tl.admitted) {
		tl.conn = tl.admitted
	}
	tl.firstTok = a.first
	if tl.firstTok.Before(tl.conn) {
		tl.firstTok = tl.conn
	}
	if a.answered {
		x.firstAnswer = tl.firstTok
	}
	x.firstSeen = x.g.now()
	x.status = http.StatusOK
}

// feedFirstToken feeds the winning attempt's pool, once: its upstream
// TTFT (from the connection) for the hedging delay, and from its
// admission to that pool for its adaptive limit; the span's first_token
// event; and the attempt's count as won (a label lookup). It runs after
// the first events were written to the client (relay.write), off the
// first token's way, with the instants firstToken read.
func (x *exchange) feedFirstToken(a *attempt) {
	if x.fed {
		return
	}
	x.fed = true
	x.g.countAttempt(a.pool, "won")
	tl := &x.tl
	x.span.eventAt("first_token", x.firstSeen)
	if a.answered {
		x.span.eventAt("first_answer", x.firstSeen)
	}
	a.pool.recordTTFT(tl.firstTok.Sub(tl.conn))
	admitted := a.admitted
	if admitted.IsZero() {
		admitted = tl.admitted
	}
	a.pool.adm.observeFirstToken(x.firstSeen, tl.firstTok.Sub(admitted))
}

// relay passes one answer on to the client and counts what it passes.
// What it reads and writes per event is the exchange's (eventState) and
// the winning attempt's reading state (eventState.rs); of its own, only
// its first line (x, the idle timer and stamp, lastUse).
type relay struct {
	x *exchange
	// The idle timeout (and, once the answer is complete, the grace for
	// its [DONE]): one timer, armed for the earliest instant the
	// upstream's silence could reach the limit in force; lastData is when
	// the last data event arrived (idleSince), stamped per event instead
	// of re-arming the timer per event.
	idle     atomic.Pointer[time.Timer] // nil: not armed
	lastData atomic.Int64               // ns, idleSince's scale
	// lastUse is the completion_tokens of the last usage seen, while
	// usage is continuous (eventState.continuous).
	lastUse   int
	a         *attempt
	ctx       context.Context
	timing    []string     // the upstream's Server-Timing header values
	masked    []byte       // an error event, its credentials masked
	limit     atomic.Int64 // the silence allowed, ns
	idleFired atomic.Bool
	rest      io.LimitedReader // the upstream's body after [DONE] (end)
}

// newRelay sets the response headers: the upstream's end-to-end ones, the
// request id and the stages known before the first byte.
func (x *exchange) newRelay(ctx context.Context, a *attempt) *relay {
	h := x.w.Header()
	copyResponseHeaders(h, a.resp.Header)
	h.Del("Content-Length")
	h.Del("Server-Timing")
	h[headerRequestID] = x.vals[valID : valID+1 : valID+1]
	h["Server-Timing"] = x.headerValue(valTiming, headerTiming(x.tl.stages()))
	x.wrote = true
	x.swv.Reset(x.w)
	if a.rd != nil {
		// No flush while the next event is already read and waiting:
		// nothing is ever held back for input that has not arrived, but
		// events that arrived together leave together (one write).
		x.swv.CoalesceWith(a.rd)
	}
	x.rs = a.buf
	x.relayStart = x.tl.start.Sub(x.g.base)
	r := &x.rel
	r.x, r.a, r.ctx, r.timing = x, a, ctx, a.resp.Header.Values("Server-Timing")
	return r
}

// queueSends sends the answer's writes through the exchange's send queue
// from here on (sendQueue: the relay reads the upstream on while the
// client takes what came before), flushed as newRelay set up.
func (x *exchange) queueSends(a *attempt) {
	c, rc := x.rawConn()
	x.sendQ.start(x.w, &x.sendG, x.g.now, x.g.sentTest, c, rc)
	x.swv.Reset(&x.sendQ)
	if a.rd != nil {
		x.swv.CoalesceWith(a.rd)
	}
}

// rawConn is the client's TCP connection for the send queue's writes
// below net/http: an HTTP/1.1 request (its answer chunked) served by
// httplimit's server on a unix system (rawWrites), nil otherwise.
func (x *exchange) rawConn() (*net.TCPConn, syscall.RawConn) {
	if x.r == nil || x.r.ProtoMajor != 1 || x.r.ProtoMinor != 1 || x.r.Method == http.MethodHead || x.g.noRawSend || !rawWrites {
		return nil, nil
	}
	c, rc, _ := httplimit.TCPConn(x.r.Context())
	return c, rc
}

// write sends the events b (queued for the client: sendQueue), counting
// the time from t0 (now, read by the caller with x.g.sinceBase) as
// backpressure: a client that does not take them fills the queue.
func (r *relay) write(b []byte, t0 time.Duration) error {
	x := r.x
	direct := x.sendQ.direct()
	err := x.swv.Event(b)
	x.lastWrite = x.g.sinceBase()
	if direct && x.sendQ.direct() {
		x.tl.post += x.lastWrite - t0 // taken whole: no wait for the client
	} else {
		x.tl.backpressure += x.lastWrite - t0
	}
	if !x.fed {
		// After the first events' write; the time it takes is counted
		// in post_process (the next event's reading starts at wrote).
		x.feedFirstToken(r.a)
	}
	return err
}

// whole sends an answer that came as one body: chunked, so that the
// Server-Timing trailer can follow it.
func (r *relay) whole() {
	x, a, tl := r.x, r.a, &r.x.tl
	tl.whole = true
	tl.foldServerTiming(r.timing, a.resp.Trailer.Values("Server-Timing"))
	x.noteEvidence(&a.wholeInfo)
	if a.askedMetrics {
		a.body = a.stripEvidence(a.body, &a.wholeInfo)
	}
	x.useEngineSplit(a.resp.Header)
	tl.post += a.scanned // reading the answer's usage and evidence
	x.tokens = a.wholeTokens
	x.dequeue() // the upstream's answer is read whole
	x.sendG.renew()
	x.w.WriteHeader(http.StatusOK)
	t0 := x.g.now()
	_, err := x.w.Write(a.body)
	if err == nil {
		err = x.swv.Flush()
	}
	tl.backpressure += x.g.now().Sub(t0)
	if err != nil {
		x.clientGone()
		return
	}
	x.setTrailer()
}

// empty sends a stream without content: its events, then its [DONE] after
// the server-timing comment, as for any stream. Its [DONE] ends
// upstream_ttft, but no token came: no TTFT, no chunk.
func (r *relay) empty() {
	x, a := r.x, r.a
	x.w.WriteHeader(http.StatusOK)
	x.queueSends(a)
	defer x.sendQ.stop()
	x.tokens, x.noContent = 0, true
	if a.doneAt > 0 {
		if err := r.write(a.pending[:a.doneAt], x.g.sinceBase()); err != nil {
			x.clientGone()
			return
		}
	}
	r.end(a.pending[a.doneAt:])
}

// events sends a stream: the events read up to the first token, then each
// further one as it arrives, until [DONE], an error or the client's end.
func (r *relay) events() {
	x, a := r.x, r.a
	x.w.WriteHeader(http.StatusOK)
	x.queueSends(a)
	defer x.sendQ.stop()
	x.tokens = a.tokens
	x.chunkNS = append(x.chunkStore().ns[:0], a.first.Sub(x.tl.start).Nanoseconds())
	r.lastUse, x.continuous = a.lastUse, a.lastUse > 0
	if x.continuous {
		x.chunkTokens = append(x.chunkStore().tok[:0], int32(a.lastUse))
	}
	if err := r.write(a.pending, x.g.sinceBase()); err != nil {
		x.clientGone()
		return
	}
	// The idle timeout cancels the upstream when no data event arrives
	// in time; each data event re-arms it (keep-alive comments do not).
	if a.idleTimeout > 0 {
		r.arm(a.idleTimeout)
	}
	defer r.disarm()
	for r.next() {
	}
}

// disarm stops the idle timer.
func (r *relay) disarm() {
	if t := r.idle.Load(); t != nil {
		t.Stop()
	}
}

// idleSince is the instant the idle timeout counts in: time.Now's, as its
// timer's, on the scale of the gateway's monotonic readings (so that with
// time.Now's clock an event's reading is its stamp, no reading more).
func (r *relay) idleSince() time.Duration { return time.Since(r.x.g.base) }

// arm (re)starts the idle timer: the upstream is cancelled when no data
// event arrives within d from now.
func (r *relay) arm(d time.Duration) {
	r.limit.Store(int64(d))
	r.lastData.Store(int64(r.idleSince()))
	a := r.a
	a.relay.Store(r)
	if t := r.idle.Load(); t != nil {
		t.Reset(d)
		return
	}
	if a.timer != nil { // the TTFT timeout's, stopped: it serves again (attempt.fire)
		r.idle.Store(a.timer)
		a.timer.Reset(d)
		return
	}
	a.timer = time.AfterFunc(d, a.fire)
	r.idle.Store(a.timer)
}

// idleCheck runs when the idle timer fires: the upstream is cancelled
// when no data event came within the limit, else the timer is armed again
// for what is left of it after the last data event.
func (r *relay) idleCheck() {
	silent := r.idleSince() - time.Duration(r.lastData.Load())
	if left := time.Duration(r.limit.Load()) - silent; left > 0 {
		t := r.idle.Load()
		for t == nil { // stored right after AfterFunc returned
			runtime.Gosched()
			t = r.idle.Load()
		}
		t.Reset(left)
		return
	}
	r.idleFired.Store(true)
	r.a.cancel()
}

// next relays one event; false when the stream has ended. The relay's
// other state (r.a, its replica) is read only on the way out.
func (r *relay) next() bool {
	x, tl := r.x, &r.x.tl
	g, rs := x.g, x.rs
	waited, busy := rs.up.waited, x.sendQ.busyFor()
	ev, err := rs.rd.Next()
	t0 := g.sinceBase()
	r.chargeRead(t0, rs.up.waited-waited, busy)
	if err != nil {
		if x.ending {
			// After the final usage chunk the answer was whole and its
			// decode over: waiting for a [DONE] that did not come
			// (streamEndGrace at most) is the gateway's own time.
			tl.post += rs.up.waited - waited
		}
		r.broken(err)
		return false
	}
	raw := ev.Raw
	probe := &rs.probe
	kind := probe.inspect(ev)
	if kind != eventNoData && !x.ending && r.idle.Load() != nil {
		stamp := t0 // time.Now's clock: the event's reading is on idleSince's scale
		if g.Now != nil {
			stamp = r.idleSince()
		}
		r.lastData.Store(int64(stamp))
	}
	switch kind {
	case eventContent:
		r.content(t0)
	case eventDone:
		tl.post += g.sinceBase() - t0
		r.end(raw)
		return false
	case eventInvalid:
		r.protocolError(raw)
		return false
	case eventError:
		raw = r.errorEvent(raw, probe)
	case eventOther:
		if used, ok := probe.usage(); ok && used > 0 {
			x.tokens = used // final usage chunk
		}
		if probe.HasUsage && probe.Choices == 0 && !probe.Typed && !probe.Native && !x.ending {
			// The answer is complete: wait streamEndGrace for [DONE],
			// no longer.
			x.ending = true
			r.arm(g.endGrace())
		}
	}
	if kind == eventContent || kind == eventOther {
		x.noteEvidence(&probe.ChunkInfo)
		if r.a.askedMetrics {
			var keep bool
			if raw, keep = r.stripped(ev, raw); !keep {
				tl.post += g.sinceBase() - t0
				return true
			}
		}
	}
	t1 := g.sinceBase() // post-processing ends, the write begins
	tl.post += t1 - t0
	if err := r.write(raw, t1); err != nil {
		x.clientGone()
		return false
	}
	return true
}

// chargeRead splits the reading of an event, ended at t0 after upWait
// spent waiting for the upstream's bytes, between the gateway's own work
// and the client's backpressure (busy: the send queue's busy time before
// the read).
func (r *relay) chargeRead(t0, upWait, busy time.Duration) {
	x, tl := r.x, &r.x.tl
	// Reading the event took t0 − lastWrite; what was not spent waiting
	// for the upstream's bytes was the gateway's own work.
	if work := t0 - x.lastWrite - upWait; work > 0 {
		tl.post += work
	}
	// Of that wait, the time the client was still taking earlier events
	// is the client's (backpressure), as when the relay waited on its
	// writes itself: the upstream's time only shows past it.
	if over := min(x.sendQ.busyFor()-busy, upWait); over > 0 {
		tl.backpressure += over
	}
}

// protocolError ends the client's stream on an upstream event that is
// not valid: not forwarded, an error event in its place, as for a reset,
// and the upstream cancelled.
func (r *relay) protocolError(raw []byte) {
	x := r.x
	pe := newProtocolError(raw)
	x.g.log().Warn("upstream protocol error", "request_id", x.id, "replica", r.a.rep.cfg.URL, "err", pe)
	x.g.countFault(r.a.pool, faultProtocol)
	x.dequeue()
	x.streamError(protocolErrorMsg, "upstream_protocol_error")
}

// errorEvent notes an upstream's error event and is the event to pass on:
// raw without the replica's credentials, should the upstream quote them.
func (r *relay) errorEvent(raw []byte, probe *chunkProbe) []byte {
	r.x.errKind = "upstream_stream_error"
	r.x.upstreamErrorEvent(r.a, probe.Error)
	r.masked = append(r.masked[:0], redact.Values(redact.Text(string(raw)), r.a.rep.cfg.credentials()...)...)
	return r.masked
}

// stripped is the event to pass on in raw's place once the evidence the
// gateway asked for is taken out (attempt.stripEvidence); keep is false
// when the whole event is the gateway's (the usage chunk it asked for).
func (r *relay) stripped(ev sse.Event, raw []byte) (out []byte, keep bool) {
	d := r.a.stripEvidence(ev.Data, &r.x.rs.probe.ChunkInfo)
	switch {
	case d == nil:
		return nil, false
	case len(d) == len(ev.Data):
		return raw, true
	}
	r.masked = append(append(append(r.masked[:0], "data: "...), d...), "\n\n"...)
	return r.masked, true
}

// content counts a content event arriving at t0 (x.g.sinceBase's
// reading): its instant, and its tokens (one, or what continuous usage
// says it added).
func (r *relay) content(t0 time.Duration) {
	x := r.x
	if x.firstAnswer.IsZero() && x.rs.probe.answer() {
		x.firstAnswer = x.g.base.Add(t0)
		x.span.eventAt("first_answer", x.firstAnswer)
	}
	x.chunkNS = append(x.chunkNS, int64(t0-x.relayStart))
	k := 1
	if used, ok := x.rs.probe.usage(); ok && (x.continuous || x.tokens == 1) {
		if !x.continuous { // usage from the second chunk on: the first carried one token
			x.chunkTokens = append(x.chunkStore().tok[:0], 1) // none yet
		}
		x.continuous = true
		k = used - r.lastUse
		r.lastUse = used
	}
	if x.continuous {
		x.chunkTokens = append(x.chunkTokens, int32(k))
	}
	if k > 0 {
		x.tokens += k
	}
}

// broken ends a stream whose reading failed: the client went away, the
// total or idle timeout expired, or the upstream's stream broke.
func (r *relay) broken(err error) {
	x, a := r.x, r.a
	g := x.g
	x.dequeue() // the upstream's answer has ended
	switch {
	case x.r.Context().Err() != nil:
		x.clientGone()
	case r.ctx.Err() != nil:
		x.streamError("total timeout expired during the stream", "timeout")
	case x.ending:
		// The final usage chunk came and the upstream sent no [DONE]
		// (within streamEndGrace, or it closed): the answer is whole;
		// the client gets its [DONE].
		r.end(nil)
	case r.idleFired.Load():
		g.log().Warn("upstream idle: no event within the idle timeout", "request_id", x.id, "replica", a.rep.cfg.URL, "idle_timeout", a.idleTimeout)
		g.countFault(a.pool, faultIdle)
		x.streamError(fmt.Sprintf("no event from the upstream within %s (idle timeout)", a.idleTimeout), "idle_timeout")
	case err == io.EOF && x.errKind == "upstream_stream_error":
		// The upstream ended its stream after its error event (logged and
		// counted then), which the client has: nothing broke.
		x.status = http.StatusBadGateway
		x.setTrailer()
	default:
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // no [DONE]
		}
		g.log().Warn("upstream stream broke", "request_id", x.id, "replica", a.rep.cfg.URL, "err", err)
		g.countFault(a.pool, faultStreamBroke)
		x.streamError("upstream stream ended before [DONE]: "+err.Error(), "upstream_stream_error")
	}
}

// end ends the client's stream at the upstream's end event: it
// writes the final event at once — an SSE comment line with the stage
// split, then "data: [DONE]" (done, or one of its own when done is nil) —
// and the timeline (decode included) ends with that write. Only then is
// the rest of the upstream's body read, for its Server-Timing trailer,
// streamEndGrace at most (past it the upstream's connection is closed);
// what the trailer says goes into the gateway's own trailer, which
// supersedes the final comment (latency.ParseTiming). An upstream that
// holds its connection open after [DONE] therefore delays neither the
// client's [DONE] nor the stages it is told.
func (r *relay) end(done []byte) {
	x, a, timing := r.x, r.a, r.timing
	g := x.g
	t0 := g.now()
	x.dequeue() // the upstream's answer has ended, whether or not the client reads
	x.foldUpstreamTiming(timing, nil)
	x.tl.end = g.now()
	x.tl.post += x.tl.end.Sub(t0)
	var buf [2 * timingBuf]byte // on the stack: the writer copies it
	final := x.tl.appendFinalTiming(buf[:0], x.tl.stages())
	t1 := g.now()
	x.tl.post += t1.Sub(x.tl.end) // the final event's making: after its stages were read
	// sse.Writer's final form: the comment shares the [DONE] event.
	// The typed APIs' end event is their [DONE]; an NDJSON stream has no
	// comments.
	var err error
	if x.api.NDJSON() {
		err = x.swv.Event(done)
	} else {
		err = x.swv.FinalComment(done, latency.FinalTimingComment, final)
	}
	if err == nil {
		err = x.sendQ.wait() // the client has the answer: the timeline ends
	}
	x.tl.end = g.now()
	x.tl.backpressure += x.tl.end.Sub(t1)
	if err != nil {
		x.clientGone()
		return
	}
	r.arm(g.endGrace()) // past it, the upstream is cancelled (idleCheck)
	r.rest = io.LimitedReader{R: &x.rs.up, N: 1 << 20}
	_, _ = io.Copy(io.Discard, &r.rest)
	r.disarm()
	if tr := a.resp.Trailer.Values("Server-Timing"); len(tr) > 0 {
		x.foldUpstreamTiming(timing, tr) // without a trailer the fold above stands
	}
	x.w.Header()[trailerTimingKey] = x.headerValue(valTrailer, x.tl.finalTiming(x.tl.stages()))
}

// foldUpstreamTiming takes the upstream's split from its Server-Timing
// header and trailer values, or else from its engine's own evidence in
// the stream (useEngineSplit).
func (x *exchange) foldUpstreamTiming(header, trailer []string) {
	x.tl.foldServerTiming(header, trailer)
	x.useEngineSplit(nil)
}

// setTrailer ends the timeline, once what was queued for the client was
// sent, and sets the Server-Timing trailer.
func (x *exchange) setTrailer() {
	_ = x.sendQ.wait()
	x.tl.end = x.g.now()
	x.w.Header()[trailerTimingKey] = x.headerValue(valTrailer, x.tl.finalTiming(x.tl.stages()))
}

// streamError ends a started stream with an error event (the OpenAI
// streaming error shape) instead of [DONE].
func (x *exchange) streamError(msg, code string) {
	msg = redact.Text(msg)
	x.errKind = code
	x.status = http.StatusBadGateway // for the metrics: the 200 already sent did not end well
	if code == "timeout" || code == "idle_timeout" {
		x.status = http.StatusGatewayTimeout
	}
	name, b := openai.ErrorPayload(x.api, x.status, openai.NewError(openai.TypeServer, msg, "", code))
	switch {
	case x.api.NDJSON():
		_ = x.swv.EndLine(append(x.swv.BeginLine(), b...))
	case name != "":
		_ = x.swv.EndData(append(x.swv.BeginEvent(name), b...))
	default:
		_ = x.swv.Data(b)
	}
	x.setTrailer()
}

// cutClient runs when the request's context ends while its answer is
// sent (the total timeout, the client's end): a client that does not read
// gets endGrace more for its writes, and the pool slots are given back
// now, not when a blocked write returns.
func (x *exchange) cutClient() {
	x.sendG.cut(x.g.endGrace())
	x.dequeue()
}

// clientGone records that the client stopped reading; the deferred cancel
// in the caller stops the upstream at once.
func (x *exchange) clientGone() {
	x.errKind = "client_closed"
	x.status = statusClientClosed
	x.tl.end = x.g.now()
}
