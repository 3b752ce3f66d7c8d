package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/tokentrace/tokentrace/internal/stats"
)

// The minimal client: one raw connection per stream, kept alive from
// request to request; the response's head and chunked framing read by
// net/http's parser straight off the connection (no transport, no
// goroutine hand-off), the body read in 4 KiB reads, each stamped when it
// returns. A token is a "data: {" in the body; tokens that arrive in one
// read share its instant.

var tokenMark = []byte("data: {")

// result is one path's measurements over the rounds kept.
type result struct {
	mu       sync.Mutex
	ttft     stats.Histogram // send → first token's read (ns)
	jitter   stats.Histogram // |gap − scheduled gap| between successive tokens (ns)
	requests int64
	tokens   int64
	errors   int64
	lastErr  error
	cpu      time.Duration // the proxy process's CPU over the rounds kept
	// mallocs is the Go proxy's allocation count after the warm-up round
	// and after the last (−1: not a Go process with metrics).
	mallocs [2]float64
	// stages is a gateway's stage histograms at the same two instants
	// (nil: not a gateway).
	stages [2]stageTotals
}

// allocsPerRequest is the Go proxy's heap allocations per request over
// the rounds kept; false where they were not read.
func (r *result) allocsPerRequest() (float64, bool) {
	if r.mallocs[0] < 0 || r.mallocs[1] < 0 || r.requests+r.errors == 0 {
		return 0, false
	}
	return (r.mallocs[1] - r.mallocs[0]) / float64(r.requests+r.errors), true
}

// stream is one client connection to a path.
type stream struct {
	addr string
	req  []byte
	c    net.Conn
	br   *bufio.Reader
	buf  []byte
}

func newStream(addr string, body []byte) *stream {
	req := fmt.Appendf(nil, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body)
	return &stream{addr: addr, req: req, buf: make([]byte, 4096)}
}

// timing is what one request measured.
type timing struct {
	ttft   time.Duration
	gaps   []time.Duration // between successive tokens
	tokens int
}

// do sends one request and reads its answer to the end; a failed
// connection is closed and the next request dials again.
func (s *stream) do(t *timing) error {
	t.ttft, t.gaps, t.tokens = 0, t.gaps[:0], 0
	if s.c == nil {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			return err
		}
		s.c, s.br = c, bufio.NewReaderSize(c, 4096)
	}
	err := s.exchange(t)
	if err != nil {
		s.c.Close()
		s.c = nil
	}
	return err
}

func (s *stream) exchange(t *timing) error {
	start := time.Now()
	if _, err := s.c.Write(s.req); err != nil {
		return err
	}
	resp, err := http.ReadResponse(s.br, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	var carry []byte // the end of the previous read, for a mark split across reads
	var last time.Time
	for {
		n, err := resp.Body.Read(s.buf)
		now := time.Now()
		if n > 0 {
			k := countMarks(carry, s.buf[:n])
			for range k {
				if t.tokens == 0 {
					t.ttft = now.Sub(start)
				} else {
					t.gaps = append(t.gaps, now.Sub(last))
				}
				last = now
				t.tokens++
			}
			carry = append(carry[:0], s.buf[max(0, n-len(tokenMark)+1):n]...)
		}
		if errors.Is(err, io.EOF) {
			if resp.Close {
				s.c.Close()
				s.c = nil
			}
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// countMarks counts the token marks that end in b, given the bytes before
// it (carry, shorter than a mark).
func countMarks(carry, b []byte) int {
	n := bytes.Count(b, tokenMark)
	if len(carry) > 0 {
		j := append(append(make([]byte, 0, 2*len(tokenMark)), carry...), b[:min(len(b), len(tokenMark)-1)]...)
		n += bytes.Count(j, tokenMark)
	}
	return n
}

func (s *stream) close() {
	if s.c != nil {
		s.c.Close()
		s.c = nil
	}
}

// record adds one request's timing to the path's result.
func (r *result) record(t *timing, gap time.Duration, want int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil && t.tokens != want {
		err = fmt.Errorf("%d tokens, want %d", t.tokens, want)
	}
	if err != nil {
		r.errors++
		r.lastErr = err
		return
	}
	r.requests++
	r.tokens += int64(t.tokens)
	r.ttft.Add(int64(t.ttft))
	for _, g := range t.gaps {
		r.jitter.Add(int64(absDuration(g - gap)))
	}
}

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
