package httplimit

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// ErrBodyTimeout is the error (wrapped) a request body read returns once
// the body deadline has passed.
var ErrBodyTimeout = errors.New("request body not received within the body timeout")

// IsBodyTimeout reports whether err is a body read that ran past the body
// deadline; the answer is 408 Request Timeout.
func IsBodyTimeout(err error) bool { return errors.Is(err, ErrBodyTimeout) }

// Handler returns h with l.BodyTimeout on every request that has a body:
// the connection's read deadline is set when the handler starts and lifted
// as soon as the body has been read to its end, so that it covers only the
// body, never the answer. (A deadline left in place would end the read
// net/http keeps on the connection while the answer is written, to notice
// a client that goes away, and cancel the request's context in the middle
// of a long stream. net/http clears the deadline when it starts that read;
// the body lifts it too, not to depend on that.)
//
// A handler that returns without reading the body leaves the deadline in
// place: net/http then discards the rest of the body under it and closes
// the connection if the client has not sent it in time.
func (l Limits) Handler(h http.Handler) http.Handler {
	if l.BodyTimeout <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(l.BodyTimeout)); err != nil {
			h.ServeHTTP(w, r) // a ResponseWriter without deadlines (a test recorder)
			return
		}
		r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc, timeout: l.BodyTimeout}
		h.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the read deadline at the body's end and turns a read
// past the deadline into ErrBodyTimeout.
type deadlineBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	timeout time.Duration
	done    bool // the deadline has been lifted
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF && !b.done:
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
		err = fmt.Errorf("%w (%v)", ErrBodyTimeout, b.timeout)
	}
	return n, err
}
