package sse

import (
	"errors"
	"io"
	"net/http"
	"slices"
)

// Writer is the project's one SSE writer: serve, the app, the gateway and
// bench's loopback server frame every event they send with it. It writes
// each event to an HTTP response in one Write and flushes it at once,
// unless the input it relays already holds the next event (see
// CoalesceWith). In steady state it allocates nothing per event: it
// frames into one buffer it keeps, and relays an event already framed
// (Event) without copying it.
//
// Its zero value is not usable; make one with NewWriter. A Writer is not
// safe for concurrent use.
type Writer struct {
	w    io.Writer
	fe   flushErrorer             // w itself, when it flushes with an error (net/http's)
	rc   *http.ResponseController // else through Unwrap; both nil: w cannot flush
	more Source                   // nil: flush every event
	buf  []byte
}

// Source is what a relay reads from: Ready reports whether the next event
// is already read and waiting (Reader.Ready).
type Source interface {
	Ready() bool
}

// NewWriter returns a Writer on w. If w is an http.ResponseWriter that can
// flush (directly or through Unwrap), every event is flushed as written.
func NewWriter(w io.Writer) *Writer {
	sw := &Writer{buf: make([]byte, 0, 512)}
	sw.Reset(w)
	return sw
}

// Reset makes the writer write to w as NewWriter's would, keeping its
// buffer (a Writer held in a larger struct, set up without allocating:
// its buffer grows on the first event it frames itself), and forgetting
// CoalesceWith's source.
func (w *Writer) Reset(dst io.Writer) {
	w.w, w.fe, w.rc, w.more, w.buf = dst, nil, nil, nil, w.buf[:0]
	switch rw := dst.(type) {
	case flushErrorer:
		w.fe = rw // net/http's own response writer: no controller needed
	case http.ResponseWriter:
		w.rc = http.NewResponseController(rw)
	}
}

// flushErrorer is net/http's response writer as http.ResponseController
// flushes it first.
type flushErrorer interface{ FlushError() error }

// CoalesceWith makes the writer skip the flush after an event while src
// has the next one waiting: events that arrived together leave together
// (one write to the client), and nothing is ever held back for input that
// has not arrived. A nil src flushes every event.
func (w *Writer) CoalesceWith(src Source) { w.more = src }

// Data writes one event "data: <payload>\n\n", with any queued events
// before it. The payload must not contain a line end (JSON from
// encoding/json and openai's encoders never does).
func (w *Writer) Data(payload []byte) error {
	w.buf = appendData(w.buf, payload)
	return w.sendBuf()
}

// BeginData begins the event "data: <payload>\n\n" in the writer's
// buffer (after any queued events) and returns that buffer, for the
// caller to append the payload to and hand to EndData: an event encoded
// in place, not copied as Data copies its payload. Nothing else may be
// written between the two calls.
func (w *Writer) BeginData() []byte { return append(w.buf, "data: "...) }

// EndData ends the event that BeginData began, b being BeginData's buffer
// with the payload appended, and writes it as Data would.
func (w *Writer) EndData(b []byte) error {
	b = append(b, '\n', '\n')
	w.buf = b
	return w.sendBuf()
}

// BeginEvent is BeginData for a named event: it begins
// "event: <name>\ndata: <payload>\n\n" (the typed events of the
// Responses and Messages APIs), ended by EndData.
func (w *Writer) BeginEvent(name string) []byte {
	w.buf = append(w.buf, "event: "...)
	w.buf = append(w.buf, name...)
	return append(w.buf, "\ndata: "...)
}

// BeginLine begins one line of a newline-delimited JSON stream (Ollama's
// native API) in the writer's buffer: the caller appends the object and
// hands the buffer to EndLine, which ends the line and writes it as
// EndData writes an event.
func (w *Writer) BeginLine() []byte { return w.buf }

// EndLine ends the line BeginLine began and writes it.
func (w *Writer) EndLine(b []byte) error {
	b = append(b, '\n')
	w.buf = b
	return w.sendBuf()
}

// Queue frames the event "data: <payload>\n\n" in the writer's buffer
// without sending it: it leaves with the next event written, in the same
// Write and flush (a role chunk and the first token, say).
func (w *Writer) Queue(payload []byte) { w.buf = appendData(w.buf, payload) }

// Event writes an event already framed (its field lines and the blank
// line that ends it), as a relay passes on what it read. Without queued
// events the bytes are written as they are, not copied.
func (w *Writer) Event(raw []byte) error {
	if len(w.buf) == 0 {
		return w.send(raw)
	}
	w.buf = append(w.buf, raw...)
	return w.sendBuf()
}

// Comment writes the event ": <text>\n\n", which clients ignore: a
// keep-alive.
func (w *Writer) Comment(text string) error {
	w.buf = append(w.buf, ": "...)
	w.buf = append(w.buf, text...)
	w.buf = append(w.buf, '\n', '\n')
	return w.sendBuf()
}

// Done writes the terminating "data: [DONE]" event.
func (w *Writer) Done() error { return w.Final(nil) }

// doneEvent is the terminating event as Final writes it without one of
// the caller's.
var doneEvent = []byte("data: [DONE]\n\n")

// Final writes the stream's last event: the comment line ": <comment…>"
// (its parts joined; none: no comment line), then done, the [DONE] event
// as read from an upstream, or "data: [DONE]\n\n" when done is nil. The
// comment shares the [DONE] event rather than being an event of its own:
// some clients (openai-go) dispatch a comment-only event as empty data
// and fail to parse it. The writer flushes it whatever CoalesceWith says.
func (w *Writer) Final(done []byte, comment ...string) error {
	n := len(done) + len(doneEvent) + 3
	for _, c := range comment {
		n += len(c)
	}
	w.buf = slices.Grow(w.buf, n) // one growth at most
	if len(comment) > 0 {
		w.buf = append(w.buf, ": "...)
		for _, c := range comment {
			w.buf = append(w.buf, c...)
		}
		w.buf = append(w.buf, '\n')
	}
	return w.final(done)
}

// FinalComment is Final with the comment line ": <prefix><comment>", its
// text given as bytes the caller formatted in a buffer of its own (no
// string made for it).
func (w *Writer) FinalComment(done []byte, prefix string, comment []byte) error {
	w.buf = slices.Grow(w.buf, len(done)+len(doneEvent)+3+len(prefix)+len(comment))
	w.buf = append(w.buf, ": "...)
	w.buf = append(w.buf, prefix...)
	w.buf = append(w.buf, comment...)
	w.buf = append(w.buf, '\n')
	return w.final(done)
}

// final ends Final and FinalComment: the [DONE] event after the comment
// line, written and flushed.
func (w *Writer) final(done []byte) error {
	if done == nil {
		done = doneEvent
	}
	w.buf = append(w.buf, done...)
	more := w.more
	w.more = nil
	err := w.sendBuf()
	w.more = more
	return err
}

// Flush flushes what was written, whatever CoalesceWith says (after the
// response's headers, say). An error means the client is gone.
func (w *Writer) Flush() error {
	if w.fe != nil {
		return w.fe.FlushError()
	}
	if w.rc == nil {
		return nil
	}
	if err := w.rc.Flush(); err != nil {
		if errors.Is(err, http.ErrNotSupported) {
			w.rc = nil // an http.ResponseWriter that cannot flush: write only
			return nil
		}
		return err
	}
	return nil
}

func appendData(b, payload []byte) []byte {
	b = append(b, "data: "...)
	b = append(b, payload...)
	return append(b, '\n', '\n')
}

// sendBuf sends the buffer and empties it, whether or not it was sent.
func (w *Writer) sendBuf() error {
	err := w.send(w.buf)
	w.buf = w.buf[:0]
	return err
}

func (w *Writer) send(b []byte) error {
	if _, err := w.w.Write(b); err != nil {
		return err
	}
	if w.more != nil && w.more.Ready() {
		return nil
	}
	return w.Flush()
}
