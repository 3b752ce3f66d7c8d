package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// upstream is the exact-schedule streaming server every path ends at: for
// each request, once its body is read (instant t0), it sends the response
// headers at once, token i (0-based) at t0 + ttft + i × gap, then
// [DONE], each as one chunk in one write, on HTTP/1.1 keep-alive
// connections. Nothing else runs on its goroutines, so what a client sees
// beyond the schedule is the path's and the machine's.
type upstream struct {
	ln     net.Listener
	sched  schedule
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// schedule is the upstream's token timing.
type schedule struct {
	TTFT   time.Duration // request read → first token
	Gap    time.Duration // between tokens
	Tokens int
}

const responseHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"

// tokenChunk is one content chunk of an OpenAI chat stream, framed as an
// SSE event inside an HTTP/1.1 chunk.
func tokenChunk(i, n int) []byte {
	finish := "null"
	if i == n-1 {
		finish = `"stop"`
	}
	ev := fmt.Sprintf(`data: {"id":"chatcmpl-floor","object":"chat.completion.chunk","created":1700000000,"model":"floor","choices":[{"index":0,"delta":{"content":" tok%d"},"finish_reason":%s}]}`+"\n\n", i%10, finish)
	return fmt.Appendf(nil, "%x\r\n%s\r\n", len(ev), ev)
}

var doneChunk = func() []byte {
	ev := "data: [DONE]\n\n"
	return fmt.Appendf(nil, "%x\r\n%s\r\n0\r\n\r\n", len(ev), ev)
}()

func startUpstream(s schedule) (*upstream, error) { return startUpstreamAt("127.0.0.1:0", s) }

// startUpstreamAt starts the upstream listening at addr.
func startUpstreamAt(addr string, s schedule) (*upstream, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	u := &upstream{ln: ln, sched: s, conns: map[net.Conn]struct{}{}}
	chunks := make([][]byte, s.Tokens)
	for i := range chunks {
		chunks[i] = tokenChunk(i, s.Tokens)
	}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !u.track(c, true) {
				c.Close()
				return
			}
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				defer u.track(c, false)
				u.serveConn(c, chunks)
			}()
		}
	}()
	return u, nil
}

// track adds or removes an open connection; false once closed.
func (u *upstream) track(c net.Conn, add bool) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if add {
		if u.closed {
			return false
		}
		u.conns[c] = struct{}{}
	} else {
		delete(u.conns, c)
	}
	return true
}

// serveConn answers the connection's requests one after another.
func (u *upstream) serveConn(c net.Conn, chunks [][]byte) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 16<<10)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return
		}
		t0 := time.Now()
		if _, err := io.WriteString(c, responseHead); err != nil {
			return
		}
		for i, ch := range chunks {
			time.Sleep(time.Until(t0.Add(u.sched.TTFT + time.Duration(i)*u.sched.Gap)))
			if _, err := c.Write(ch); err != nil {
				return
			}
		}
		if _, err := c.Write(doneChunk); err != nil {
			return
		}
	}
}

func (u *upstream) addr() string { return u.ln.Addr().String() }

func (u *upstream) close() {
	u.mu.Lock()
	u.closed = true
	for c := range u.conns {
		c.Close()
	}
	u.mu.Unlock()
	u.ln.Close()
	u.wg.Wait()
}
