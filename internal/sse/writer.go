package sse

import (
	"io"
	"net/http"
)

// Writer writes events to an HTTP response and flushes each one at once.
// Its zero value is not usable; make one with NewWriter.
type Writer struct {
	w       io.Writer
	flusher http.Flusher
	buf     []byte
}

// NewWriter returns a Writer on w. If w is an http.ResponseWriter that can
// flush (directly or through Unwrap), every event is flushed as written.
func NewWriter(w io.Writer) *Writer {
	sw := &Writer{w: w}
	if rw, ok := w.(http.ResponseWriter); ok {
		if f, ok := rw.(http.Flusher); ok {
			sw.flusher = f
		} else {
			// http.ResponseController finds a Flusher behind wrappers.
			rc := http.NewResponseController(rw)
			sw.flusher = flushFunc(func() { _ = rc.Flush() })
		}
	}
	return sw
}

type flushFunc func()

func (f flushFunc) Flush() { f() }

// Data writes one event "data: <payload>\n\n" and flushes it. The payload
// must not contain a newline (JSON from encoding/json never does).
func (w *Writer) Data(payload []byte) error {
	w.buf = append(w.buf[:0], "data: "...)
	w.buf = append(w.buf, payload...)
	w.buf = append(w.buf, '\n', '\n')
	return w.write()
}

// Comment writes ": <text>\n\n", which clients ignore; useful as a
// keep-alive or to carry trailing information readable by humans.
func (w *Writer) Comment(text string) error {
	w.buf = append(w.buf[:0], ": "...)
	w.buf = append(w.buf, text...)
	w.buf = append(w.buf, '\n', '\n')
	return w.write()
}

// Done writes the terminating "data: [DONE]" event.
func (w *Writer) Done() error { return w.Data([]byte("[DONE]")) }

func (w *Writer) write() error {
	if _, err := w.w.Write(w.buf); err != nil {
		return err
	}
	if w.flusher != nil {
		w.flusher.Flush()
	}
	return nil
}
