package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/redact"
)

// maxEventBytes bounds one SSE event read from upstream.
const maxEventBytes = 16 << 20

// readEvent appends to dst the lines of the next SSE event, through the
// blank line that ends it. Stray blank lines before an event are skipped.
// At the end of input it returns what it read with io.EOF.
func readEvent(rd *bufio.Reader, dst []byte) ([]byte, error) {
	start := len(dst)
	for {
		line, err := rd.ReadSlice('\n')
		if len(line) > 0 {
			blank := len(line) == 1 || (len(line) == 2 && line[0] == '\r')
			if blank && err == nil {
				if len(dst) == start {
					continue // no event yet
				}
				return append(dst, line...), nil
			}
			dst = append(dst, line...)
			if len(dst)-start > maxEventBytes {
				return dst, fmt.Errorf("upstream event over %d bytes", maxEventBytes)
			}
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			return dst, io.EOF
		default:
			return dst, err
		}
	}
}

type eventKind int

const (
	eventOther   eventKind = iota // role-only chunk, usage chunk, comment
	eventContent                  // carries output tokens
	eventDone                     // data: [DONE]
	eventError                    // data: {"error": ...}
	eventInvalid                  // a data payload that is neither [DONE] nor a JSON object
	eventNoData                   // comments or other fields only (a keep-alive)
)

// chunkProbe decodes the few fields of a stream chunk the gateway needs.
type chunkProbe struct {
	Choices []struct {
		Delta *struct {
			Content          string          `json:"content"`
			ReasoningContent string          `json:"reasoning_content"`
			Reasoning        string          `json:"reasoning"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
		} `json:"delta"`
		Text string `json:"text"`
	} `json:"choices"`
	Usage  *chunkUsage     `json:"usage"`
	usage  chunkUsage      // what Usage points to when fastContent read it
	joined []byte          // the data of an event with several data lines
	Error  json.RawMessage `json:"error"`
	// Metrics is the vLLM-style per-request timing object some servers
	// (tokentrace serve among them) put on the final usage chunk.
	Metrics *struct {
		QueueTimeMs      float64 `json:"queue_time_ms"`
		PrefillTimeMs    float64 `json:"prefill_time_ms"`
		GenerationTimeMs float64 `json:"generation_time_ms"`
	} `json:"metrics"`
}

// chunkUsage is the part of a chunk's usage the gateway reads.
type chunkUsage struct {
	CompletionTokens int `json:"completion_tokens"`
}

var doneMarker = []byte("[DONE]")

// inspect classifies one SSE event by its data: the payload of its data
// lines (joined by newlines, as SSE does, when there are several). An
// event without data (comments, other fields) is eventNoData. A payload
// that is neither [DONE] nor a JSON object is eventInvalid: an upstream
// protocol error. A JSON object of an unexpected shape is eventOther
// (forwarded untouched); the fast path recognises content chunks by their
// patterns without validating every byte.
func (p *chunkProbe) inspect(ev []byte) eventKind {
	// encoding/json decodes into reused slice elements without zeroing
	// them: clear the whole backing array first.
	clear(p.Choices[:cap(p.Choices)])
	p.Choices, p.Usage, p.Error, p.Metrics = p.Choices[:0], nil, nil, nil
	data, ok := p.data(ev)
	if !ok {
		return eventNoData
	}
	data = bytes.TrimSpace(data)
	if bytes.Equal(data, doneMarker) {
		return eventDone
	}
	if len(data) < 2 || data[0] != '{' || data[len(data)-1] != '}' {
		return eventInvalid
	}
	if ok, used := fastContent(data); ok {
		if used > 0 {
			p.usage.CompletionTokens = used
			p.Usage = &p.usage
		}
		return eventContent
	}
	if err := json.Unmarshal(data, p); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return eventInvalid
		}
		return eventOther // valid JSON of another shape: forwarded untouched
	}
	if len(p.Error) > 0 && string(p.Error) != "null" {
		return eventError
	}
	for _, c := range p.Choices {
		if c.Text != "" || (c.Delta != nil && (c.Delta.Content != "" || c.Delta.ReasoningContent != "" ||
			c.Delta.Reasoning != "" || (len(c.Delta.ToolCalls) > 0 && string(c.Delta.ToolCalls) != "null"))) {
			return eventContent
		}
	}
	return eventOther
}

// data returns the payload of an event's data lines, false when it has
// none. One line's payload is a slice of ev; several are joined with
// newlines into p.joined.
func (p *chunkProbe) data(ev []byte) ([]byte, bool) {
	var first []byte
	n := 0
	for len(ev) > 0 {
		line := ev
		if i := bytes.IndexByte(ev, '\n'); i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		d, ok := bytes.CutPrefix(bytes.TrimSuffix(line, []byte("\r")), []byte("data:"))
		if !ok {
			continue
		}
		switch n++; n {
		case 1:
			first = d
		case 2:
			p.joined = append(append(append(p.joined[:0], first...), '\n'), d...)
		default:
			p.joined = append(append(p.joined, '\n'), d...)
		}
	}
	switch n {
	case 0:
		return nil, false
	case 1:
		return first, true
	}
	return p.joined, true
}

// Patterns of a non-empty output field in a compact chunk. Inside a JSON
// string every quote is escaped, so text a model generates cannot forge
// them.
var contentPatterns = [][]byte{[]byte(`"content":"`), []byte(`"text":"`), []byte(`"reasoning_content":"`), []byte(`"reasoning":"`)}

var usageKey = []byte(`"usage":`)

// fastContent recognises the common content chunk without decoding it:
// one of the patterns followed by a non-empty string, neither error nor
// metrics (whose values the gateway needs), and at most one usage, either
// null (sent on every chunk by servers that honour include_usage) or an
// object with a positive completion_tokens (continuous usage), which it
// returns as used (0: none). Anything else (role-only and finish chunks,
// spaced JSON, a usage it cannot read so) takes the full decode.
func fastContent(data []byte) (ok bool, used int) {
	if bytes.Contains(data, []byte(`"error"`)) || bytes.Contains(data, []byte(`"metrics"`)) {
		return false, 0
	}
	if i := bytes.Index(data, usageKey); i >= 0 {
		rest := data[i+len(usageKey):]
		if bytes.Contains(rest, usageKey) {
			return false, 0
		}
		if !bytes.HasPrefix(rest, []byte("null")) {
			if used = completionTokens(rest); used <= 0 {
				return false, 0
			}
		}
	} else if bytes.Contains(data, []byte(`"usage"`)) { // spaced, or not a key
		return false, 0
	}
	for _, p := range contentPatterns {
		if i := bytes.Index(data, p); i >= 0 && i+len(p) < len(data) && data[i+len(p)] != '"' {
			return true, used
		}
	}
	return false, 0
}

// completionTokens finds usage.completion_tokens in a whole answer without
// decoding it (the last occurrence: usage follows the choices); 0 if absent.
func completionTokens(body []byte) int {
	key := []byte(`"completion_tokens":`)
	i := bytes.LastIndex(body, key)
	if i < 0 {
		return 0
	}
	rest := bytes.TrimLeft(body[i+len(key):], " ")
	n := 0
	for _, c := range rest {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
		if n > 1<<30 {
			return 0
		}
	}
	return n
}

// nextEventReady reports whether rd already holds a complete next event
// (read from the network, not yet consumed), so that a flush may wait for
// it without waiting on the network.
func nextEventReady(rd *bufio.Reader) bool {
	if rd == nil || rd.Buffered() == 0 {
		return false
	}
	b, _ := rd.Peek(rd.Buffered())
	return bytes.Contains(b, []byte("\n\n")) || bytes.Contains(b, []byte("\r\n\r\n"))
}

// stream sends the winning attempt's answer to the client: the events read
// so far, then each further event as it arrives, flushed one by one. It
// returns true (a first token existed).
func (x *exchange) stream(ctx context.Context, a *attempt) bool {
	g := x.g
	defer a.rep.outstanding.Add(-1)
	defer a.resp.Body.Close()
	defer a.cancel()
	tl := &x.tl
	tl.conn = a.started
	if c := a.gotConn.Load(); c != nil {
		tl.conn = *c
	}
	if tl.conn.Before(tl.admitted) {
		tl.conn = tl.admitted
	}
	tl.firstTok = a.first
	if tl.firstTok.Before(tl.conn) {
		tl.firstTok = tl.conn
	}
	x.span.event("first_token")
	a.pool.recordTTFT(tl.firstTok.Sub(tl.conn))
	x.pool.adm.observeFirstToken(g.now(), tl.firstTok.Sub(tl.admitted))
	x.status = http.StatusOK

	h := x.w.Header()
	copyResponseHeaders(h, a.resp.Header)
	h.Del("Content-Length")
	h.Del("Server-Timing")
	h.Set(headerRequestID, x.id)
	h.Set("Server-Timing", headerTiming(tl.stages()))
	timingValues := a.resp.Header.Values("Server-Timing")

	rc := http.NewResponseController(x.w)
	// wrote is when the last write ended.
	var wrote time.Time
	// write sends b, counting the time from t0 (now, read by the caller)
	// as backpressure.
	write := func(b []byte, t0 time.Time) error {
		_, err := x.w.Write(b)
		// Flush unless the next event is already read and waiting: nothing
		// is ever held back for input that has not arrived, but events that
		// arrived together leave together (one write to the client).
		if err == nil && !nextEventReady(a.rd) {
			err = rc.Flush()
		}
		wrote = g.now()
		tl.backpressure += wrote.Sub(t0)
		return err
	}
	x.wrote = true

	if a.whole {
		tl.whole = true
		tl.foldServerTiming(timingValues, a.resp.Trailer.Values("Server-Timing"))
		t0 := g.now()
		x.tokens = completionTokens(a.body)
		tl.post += g.now().Sub(t0)
		// No Content-Length: the body goes chunked so that the
		// Server-Timing trailer can follow it.
		x.w.WriteHeader(http.StatusOK)
		if err := write(a.body, g.now()); err != nil {
			x.clientGone()
			return true
		}
		x.setTrailer()
		return true
	}

	x.w.WriteHeader(http.StatusOK)
	x.tokens = a.tokens
	x.chunkNS = append(make([]int64, 0, 64), a.first.Sub(tl.start).Nanoseconds())
	lastUse, continuous := a.lastUse, a.lastUse > 0
	if continuous {
		x.chunkTokens = append(make([]int32, 0, 64), int32(a.lastUse))
	}
	if a.done {
		// A stream without content: its events, then its [DONE] after
		// the server-timing comment, as for any stream.
		x.tokens = 0
		if a.doneAt > 0 {
			if err := write(a.pending[:a.doneAt], g.now()); err != nil {
				x.clientGone()
				return true
			}
		}
		x.endStream(a, timingValues, a.pending[a.doneAt:])
		return true
	}
	if err := write(a.pending, g.now()); err != nil {
		x.clientGone()
		return true
	}
	// The idle timeout cancels the upstream when no data event arrives
	// in time; each data event re-arms it (keep-alive comments do not).
	var idle *time.Timer
	var idleFired atomic.Bool
	if a.idleTimeout > 0 {
		idle = time.AfterFunc(a.idleTimeout, func() {
			idleFired.Store(true)
			a.cancel()
		})
		defer idle.Stop()
	}
	buf := make([]byte, 0, 1024)
	var probe chunkProbe
	for {
		var err error
		waited := a.up.waited
		buf, err = readEvent(a.rd, buf[:0])
		t0 := g.now()
		// Reading the event took t0 − wrote; what was not spent waiting
		// for the upstream's bytes was the gateway's own work.
		if work := t0.Sub(wrote) - (a.up.waited - waited); work > 0 {
			tl.post += work
		}
		if err != nil {
			switch {
			case x.r.Context().Err() != nil:
				x.clientGone()
			case ctx.Err() != nil:
				x.streamError("total timeout expired during the stream", "timeout")
			case idleFired.Load():
				g.log().Warn("upstream idle: no event within the idle timeout", "request_id", x.id, "replica", a.rep.cfg.URL, "idle_timeout", a.idleTimeout)
				g.countFault(a.pool, faultIdle)
				x.streamError(fmt.Sprintf("no event from the upstream within %s (idle timeout)", a.idleTimeout), "idle_timeout")
			default:
				if errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF
				}
				g.log().Warn("upstream stream broke", "request_id", x.id, "replica", a.rep.cfg.URL, "err", err)
				g.countFault(a.pool, faultStreamBroke)
				x.streamError("upstream stream ended before [DONE]: "+err.Error(), "upstream_stream_error")
			}
			return true
		}
		kind := probe.inspect(buf)
		if idle != nil && kind != eventNoData {
			idle.Reset(a.idleTimeout)
		}
		switch kind {
		case eventContent:
			x.chunkNS = append(x.chunkNS, t0.Sub(tl.start).Nanoseconds())
			k := 1
			if probe.Usage != nil && (continuous || x.tokens == 1) {
				if !continuous { // usage from the second chunk on: the first carried one token
					x.chunkTokens = append(x.chunkTokens, 1)
				}
				continuous = true
				k = probe.Usage.CompletionTokens - lastUse
				lastUse = probe.Usage.CompletionTokens
			}
			if continuous {
				x.chunkTokens = append(x.chunkTokens, int32(k))
			}
			if k > 0 {
				x.tokens += k
			}
		case eventDone:
			tl.post += g.now().Sub(t0)
			x.endStream(a, timingValues, buf)
			return true
		case eventInvalid:
			// Not forwarded: the client's stream ends with an error
			// event, as for a reset, and the upstream is cancelled.
			pe := newProtocolError(buf)
			g.log().Warn("upstream protocol error", "request_id", x.id, "replica", a.rep.cfg.URL, "err", pe)
			g.countFault(a.pool, faultProtocol)
			x.streamError(protocolErrorMsg, "upstream_protocol_error")
			return true
		case eventError:
			x.errKind = "upstream_stream_error"
			// Passed on without the replica's credentials, should the
			// upstream quote them.
			buf = append(buf[:0], redact.Values(redact.Text(string(buf)), a.rep.cfg.credentials()...)...)
		case eventOther:
			if probe.Usage != nil && probe.Usage.CompletionTokens > 0 {
				x.tokens = probe.Usage.CompletionTokens // final usage chunk
			}
			if m := probe.Metrics; m != nil {
				ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
				x.metricsSplit = &[3]time.Duration{ms(m.QueueTimeMs), ms(m.PrefillTimeMs), ms(m.GenerationTimeMs)}
			}
		}
		t1 := g.now() // post-processing ends, the write begins
		tl.post += t1.Sub(t0)
		if err := write(buf, t1); err != nil {
			x.clientGone()
			return true
		}
	}
}

// endStream reads the upstream to its end (for its trailer), then writes
// the final event: an SSE comment line with the stage split, then
// "data: [DONE]".
func (x *exchange) endStream(a *attempt, timing []string, done []byte) {
	g := x.g
	t0 := g.now()
	waited := a.up.waited
	_, _ = io.Copy(io.Discard, io.LimitReader(a.rd, 1<<20))
	t0 = t0.Add(a.up.waited - waited) // waiting for the upstream's end is not post-processing
	x.tl.foldServerTiming(timing, a.resp.Trailer.Values("Server-Timing"))
	if !x.tl.serverSplit && x.metricsSplit != nil {
		x.tl.serverQueue, x.tl.serverPrefill, x.tl.serverDecode = x.metricsSplit[0], x.metricsSplit[1], x.metricsSplit[2]
		x.tl.serverSplit = true
	}
	x.tl.post += g.now().Sub(t0)
	x.tl.end = g.now()
	comment := latency.FinalTimingComment + x.tl.finalTiming(x.tl.stages())
	msg := make([]byte, 0, len(comment)+len(done)+4)
	// The comment shares the [DONE] event rather than being an event of
	// its own: some clients (openai-go) dispatch a comment-only event as
	// empty data and fail to parse it.
	msg = append(msg, ": "...)
	msg = append(msg, comment...)
	msg = append(msg, '\n')
	if done == nil {
		done = []byte("data: [DONE]\n\n")
	}
	msg = append(msg, done...)
	t1 := g.now()
	_, err := x.w.Write(msg)
	if err == nil {
		err = http.NewResponseController(x.w).Flush()
	}
	x.tl.backpressure += g.now().Sub(t1)
	if err != nil {
		x.clientGone()
		return
	}
	x.setTrailer()
}

// setTrailer ends the timeline and sets the Server-Timing trailer.
func (x *exchange) setTrailer() {
	x.tl.end = x.g.now()
	x.w.Header().Set(http.TrailerPrefix+"Server-Timing", x.tl.finalTiming(x.tl.stages()))
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
	b, _ := json.Marshal(openai.ErrorBody{Error: openai.NewError(openai.TypeServer, msg, "", code)})
	ev := make([]byte, 0, len(b)+8)
	ev = append(ev, "data: "...)
	ev = append(ev, b...)
	ev = append(ev, '\n', '\n')
	if _, err := x.w.Write(ev); err == nil {
		_ = http.NewResponseController(x.w).Flush()
	}
	x.setTrailer()
}

// clientGone records that the client stopped reading; the deferred cancel
// in the caller stops the upstream at once.
func (x *exchange) clientGone() {
	x.errKind = "client_closed"
	x.status = statusClientClosed
	x.tl.end = x.g.now()
}
