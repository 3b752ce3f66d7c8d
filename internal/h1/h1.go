package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Transport carries plain-HTTP/1.1 requests on the caller's goroutine:
// the request is written and the answer read by the goroutine that asked,
// over pooled keep-alive connections. net/http's Transport hands each
// request to a writer goroutine and each answer's headers back from a
// reader goroutine of the connection — two wake-ups of another goroutine
// per request, one of them on the path to the first token, and two
// goroutines' stacks per connection; here there are none. The answer is
// parsed by net/http's own http.ReadResponse (status line, headers,
// chunked bodies, trailers), so only the connection's life is this
// transport's: a connection goes back to the pool when its answer was read
// to its end and neither side asked to close it; an answer closed before
// its end closes its connection.
//
// A request whose context ends has its connection's deadline set in the
// past (context.AfterFunc: no goroutine unless it ends), so a blocked
// write or read returns at once, with the context's error. A pooled
// connection its server had closed fails the request (end of file, a
// reset): staleconn.Transport, which wraps this one, resends it (the
// GotConn hook says the connection was reused, GotFirstResponseByte that
// no answer had begun). Anything but plain http:// (TLS, HTTP/2) goes
// through other; proxies are not this transport's (a caller with one
// sends through other).
type Transport struct {
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	other       http.RoundTripper // everything but plain http://
	maxIdle     int               // idle connections kept per host
	idleTimeout time.Duration     // an idle connection older than this is closed, not reused
	readSize    int               // each connection's read buffer
	writeSize   int               // the write buffers' size
	// writers are the buffers requests are written through, shared by
	// the connections: a connection holds one only while it writes (a
	// stream's connection is read for minutes after its request).
	writers sync.Pool

	mu   sync.Mutex
	idle map[string][]*h1Conn // by host:port, most recently used last
}

// Config is a Transport's pool and buffers.
type Config struct {
	MaxIdlePerHost  int           // idle connections kept per host
	IdleConnTimeout time.Duration // an idle connection older than this is closed (0: never)
	ReadBufferSize  int           // each connection's read buffer (0: 4 KiB)
	WriteBufferSize int           // the buffer a request is written through, taken from a shared pool (0: 4 KiB)
}

// New returns a Transport that dials with dial and sends what is not
// plain http:// through other.
func New(dial func(ctx context.Context, network, addr string) (net.Conn, error), other http.RoundTripper, c Config) *Transport {
	t := &Transport{dial: dial, other: other, maxIdle: c.MaxIdlePerHost, idleTimeout: c.IdleConnTimeout,
		readSize: c.ReadBufferSize, writeSize: c.WriteBufferSize}
	if t.readSize <= 0 {
		t.readSize = 4 << 10
	}
	if t.writeSize <= 0 {
		t.writeSize = 4 << 10
	}
	return t
}

// h1Conn is one upstream connection with its buffers.
type h1Conn struct {
	c      net.Conn
	br     *bufio.Reader
	key    string
	idleAt time.Time // when it went back to the pool
	reused bool      // it served a request before
}

// errH1Closed is a pooled connection's end seen while waiting for an
// answer: an upstream that closed it (staleconn.Dropped: end of file).
var errH1Closed = fmt.Errorf("upstream closed the connection before answering: %w", io.EOF)

// RoundTrip sends req and reads its answer's head on the calling
// goroutine; the answer's body is read by the caller's Reads.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" || req.URL.Host == "" {
		return t.other.RoundTrip(req)
	}
	ctx := req.Context()
	trace := httptrace.ContextClientTrace(ctx)
	key := canonicalAddr(req.URL)
	pc, err := t.get(ctx, key)
	if err != nil {
		closeRequestBody(req)
		return nil, err
	}
	if trace != nil && trace.GotConn != nil {
		trace.GotConn(httptrace.GotConnInfo{Conn: pc.c, Reused: pc.reused})
	}
	b := &h1Body{t: t, pc: pc}
	b.stop = context.AfterFunc(ctx, func() {
		err := ctx.Err()
		b.ctxErr.Store(&err)
		_ = pc.c.SetDeadline(aLongTimeAgo)
	})
	resp, err := t.exchange(req, pc, trace)
	if err != nil {
		b.stop()
		_ = pc.c.Close()
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		return nil, err
	}
	b.body = resp.Body
	b.keep = !resp.Close && !req.Close && resp.StatusCode != http.StatusSwitchingProtocols
	resp.Body = b
	return resp, nil
}

// exchange writes req on pc and reads the head of its answer (1xx
// interim answers skipped).
func (t *Transport) exchange(req *http.Request, pc *h1Conn, trace *httptrace.ClientTrace) (*http.Response, error) {
	if err := t.write(req, pc.c); err != nil {
		return nil, err
	}
	if trace != nil && trace.WroteRequest != nil {
		trace.WroteRequest(httptrace.WroteRequestInfo{})
	}
	if _, err := pc.br.Peek(1); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errH1Closed
		}
		return nil, err
	}
	if trace != nil && trace.GotFirstResponseByte != nil {
		trace.GotFirstResponseByte()
	}
	for {
		resp, err := http.ReadResponse(pc.br, req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue // an interim answer: the final one follows
		}
		return resp, nil
	}
}

// write writes req to c through a pooled buffer.
func (t *Transport) write(req *http.Request, c net.Conn) error {
	bw, _ := t.writers.Get().(*bufio.Writer)
	if bw == nil {
		bw = bufio.NewWriterSize(c, t.writeSize)
	} else {
		bw.Reset(c)
	}
	err := req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	t.writers.Put(bw)
	return err
}

// get takes an idle connection to key, or dials one.
func (t *Transport) get(ctx context.Context, key string) (*h1Conn, error) {
	now := time.Now()
	t.mu.Lock()
	for l := t.idle[key]; len(l) > 0; l = t.idle[key] {
		pc := l[len(l)-1]
		l[len(l)-1] = nil
		t.idle[key] = l[:len(l)-1]
		if t.idleTimeout > 0 && now.Sub(pc.idleAt) > t.idleTimeout {
			t.mu.Unlock()
			_ = pc.c.Close()
			t.mu.Lock()
			continue
		}
		t.mu.Unlock()
		pc.reused = true
		return pc, nil
	}
	t.mu.Unlock()
	c, err := t.dial(ctx, "tcp", key)
	if err != nil {
		return nil, err
	}
	return &h1Conn{c: c, br: bufio.NewReaderSize(c, t.readSize), key: key}, nil
}

// put gives a connection whose answer was read whole back to the pool.
func (t *Transport) put(pc *h1Conn) {
	if pc.br.Buffered() > 0 {
		_ = pc.c.Close() // bytes after the answer: not a connection to trust
		return
	}
	pc.idleAt = time.Now()
	t.mu.Lock()
	if t.idle == nil {
		t.idle = map[string][]*h1Conn{}
	}
	if l := t.idle[pc.key]; len(l) < t.maxIdle {
		t.idle[pc.key] = append(l, pc)
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	_ = pc.c.Close()
}

// CloseIdleConnections closes the idle connections, this transport's and
// other's.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, l := range idle {
		for _, pc := range l {
			_ = pc.c.Close()
		}
	}
	if c, ok := t.other.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// h1Body is an answer's body: its end gives the connection back (when it
// may be kept), closing it before the end closes the connection.
type h1Body struct {
	t    *Transport
	pc   *h1Conn
	body io.ReadCloser // http.ReadResponse's
	stop func() bool   // the context's AfterFunc
	// ctxErr is the request context's Err once it ended (set by the
	// AfterFunc, before the deadline it sets; nil until then).
	ctxErr atomic.Pointer[error]
	keep   bool // the connection may serve another request after this answer

	mu   sync.Mutex
	done bool // the connection was given back or closed
}

func (b *h1Body) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err == nil {
		return n, nil
	}
	if err == io.EOF {
		b.finish(true)
		return n, err
	}
	if cerr := b.ctxErr.Load(); cerr != nil {
		err = *cerr
	}
	b.finish(false)
	return n, err
}

// Close ends the answer: read to its end, its connection is kept (it
// already was, by Read); else the connection is closed.
func (b *h1Body) Close() error {
	b.finish(false)
	return nil
}

// finish releases the connection once: back to the pool after a whole
// answer that allows it (and whose context's hook had not fired), else
// closed.
func (b *h1Body) finish(whole bool) {
	b.mu.Lock()
	if b.done {
		b.mu.Unlock()
		return
	}
	b.done = true
	b.mu.Unlock()
	if whole && b.keep && b.stop() {
		b.t.put(b.pc)
		return
	}
	b.stop()
	_ = b.pc.c.Close()
}

// aLongTimeAgo is a deadline in the past: set on a connection, it makes
// its blocked reads and writes return at once.
var aLongTimeAgo = time.Unix(1, 0)

// canonicalAddr is an http:// URL's host:port, with the default port 80
// when it names none: the host as the URL has it when it names a port (no
// new string per request), else joined with 80.
func canonicalAddr(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// closeRequestBody closes a request's body that will not be sent, as a
// RoundTripper must.
func closeRequestBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
