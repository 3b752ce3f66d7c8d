package gateway

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// sendGuard bounds the writes of an answer to its client (nginx's
// send_timeout, server.send_timeout): a write deadline SendTimeout ahead,
// renewed before each write (at most every sixteenth of it, so a write
// is allowed 15/16 of the timeout at least), and cut to a short grace when
// the request's context ends (its total timeout, the client's end) while
// the answer is being sent. A write past its deadline fails, which ends
// the stream and closes the client's connection.
type sendGuard struct {
	rc      http.ResponseController
	timeout time.Duration
	renewed time.Time // when the deadline was last set ahead
	// unsupported: the writer has no deadlines (a test recorder).
	unsupported bool
	cutAt       atomic.Int64 // the cut deadline, Unix ns; 0: none
	mu          sync.Mutex   // orders cut against over
	over        bool         // the handler returned: the connection is not the request's any more
}

// start sets the guard up for w with the configured timeout (0: none).
func (s *sendGuard) start(w http.ResponseWriter, timeout time.Duration) {
	s.rc = *http.NewResponseController(w)
	s.timeout = timeout
	s.unsupported = s.rc.SetWriteDeadline(time.Time{}) != nil
}

// renew sets the write deadline SendTimeout ahead, unless it was set
// less than a sixteenth of it ago; a cut deadline stands.
func (s *sendGuard) renew() {
	if s.unsupported || s.timeout <= 0 {
		return
	}
	now := time.Now()
	if now.Sub(s.renewed) < s.timeout/16 {
		return
	}
	s.renewed = now
	_ = s.rc.SetWriteDeadline(now.Add(s.timeout))
	if c := s.cutAt.Load(); c != 0 { // cut meanwhile: its deadline stands
		_ = s.rc.SetWriteDeadline(time.Unix(0, c))
	}
}

// cut gives the writes grace more from now, no longer; it may run on
// another goroutine than the writes, but not after end.
func (s *sendGuard) cut(grace time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.over || s.unsupported {
		return
	}
	at := time.Now().Add(grace)
	s.cutAt.Store(at.UnixNano())
	_ = s.rc.SetWriteDeadline(at)
}

// end marks the handler's return: no cut touches the connection after it
// (a later request may be using it).
func (s *sendGuard) end() {
	s.mu.Lock()
	s.over = true
	s.mu.Unlock()
}
