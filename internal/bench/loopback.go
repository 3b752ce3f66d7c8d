package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/sse"
)

// loopback is an in-process server that streams chat completion chunks on
// a fixed, known schedule and notes the instant each content chunk was
// flushed to the kernel, on the run's own clock. Comparing a client's
// arrival instants with those flush instants measures the client: its
// parsing, scheduling and the loopback hop, nothing of a model.
type loopback struct {
	// Tokens per answer, the delay of the first content chunk after the
	// request's arrival, and the gap between chunks.
	Tokens int
	First  time.Duration
	Gap    time.Duration
	now    func() int64

	mu      sync.Mutex
	flushes map[string][]int64 // request id → flush instant of each content chunk
	keep    bool

	ln  net.Listener
	srv *http.Server
}

var (
	loopRole  = []byte(`{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`)
	loopToken = []byte(`{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" tok"},"finish_reason":null}]}`)
	loopLast  = []byte(`{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" tok"},"finish_reason":"length"}]}`)
)

// startLoopback starts the server on 127.0.0.1. keep records flush instants.
func startLoopback(tokens int, first, gap time.Duration, now func() int64, keep bool) (*loopback, error) {
	l := &loopback{Tokens: max(tokens, 1), First: first, Gap: gap, now: now, keep: keep, flushes: map[string][]int64{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("loopback server: %w", err)
	}
	l.ln = ln
	l.srv = httplimit.Limits{}.WithDefaults(1).Server(l)
	go func() { _ = l.srv.Serve(ln) }()
	return l, nil
}

func (l *loopback) URL() string { return "http://" + l.ln.Addr().String() }

func (l *loopback) Close() { _ = l.srv.Close() }

// flushed returns and forgets a request's flush instants.
func (l *loopback) flushed(id string) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.flushes[id]
	delete(l.flushes, id)
	return f
}

func (l *loopback) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost { // completions only: no /models, no /metrics
		http.NotFound(w, r)
		return
	}
	arrived := time.Now()
	_, _ = io.Copy(io.Discard, r.Body)
	id := r.Header.Get("X-Request-Id")
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	sw := sse.NewWriter(w)
	var inst []int64
	if l.keep {
		inst = make([]int64, 0, l.Tokens)
	}
	wait := func(d time.Duration) {
		if d := time.Until(arrived.Add(d)); d > 0 {
			time.Sleep(d)
		}
	}
	for i := range l.Tokens {
		wait(l.First + time.Duration(i)*l.Gap)
		if i == 0 {
			sw.Queue(loopRole) // leaves with the first token
		}
		b := loopToken
		if i == l.Tokens-1 {
			b = loopLast
		}
		if sw.Data(b) != nil {
			return
		}
		if l.keep && id != "" {
			inst = append(inst, l.now())
			l.mu.Lock()
			l.flushes[id] = inst
			l.mu.Unlock()
		}
	}
	usage := `{"id":"x","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":` +
		strconv.Itoa(l.Tokens) + `,"total_tokens":` + strconv.Itoa(l.Tokens+4) + "}}"
	sw.Queue([]byte(usage)) // leaves with [DONE]
	_ = sw.Done()
}

// minimalClient is the floor: a raw HTTP/1.1 exchange on one TCP
// connection that timestamps the first read bringing an event and does
// nothing else. It returns the instant of the first content byte and of
// the end of the stream.
func minimalClient(ctx context.Context, addr, id string, now func() int64) (first, end int64, err error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`
	req := "POST /v1/chat/completions HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nX-Request-Id: " + id +
		"\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body
	if _, err := io.WriteString(conn, req); err != nil {
		return 0, 0, err
	}
	br := bufio.NewReaderSize(conn, 4096)
	buf := make([]byte, 4096)
	for {
		n, err := br.Read(buf)
		if n > 0 {
			t := now()
			if first == 0 && containsData(buf[:n]) {
				first = t
			}
			end = t
		}
		if err != nil {
			if err == io.EOF {
				return first, end, nil
			}
			return first, end, err
		}
	}
}

func containsData(b []byte) bool {
	for i := 0; i+5 <= len(b); i++ {
		if b[i] == 'd' && string(b[i:i+5]) == "data:" {
			return true
		}
	}
	return false
}
