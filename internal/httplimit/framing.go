package httplimit

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
)

// net/http's server drops a request's Content-Length when it also has a
// Transfer-Encoding, before any handler sees it, and keeps the connection
// (RFC 9112 §6.3 says to close it: the two framings may be a smuggling
// attempt). framingConn watches the request heads a connection carries
// for both headers, and closeAmbiguous closes that connection after the
// answer.

// framingConn marks itself ambiguous once one of the request heads read
// through it names both Content-Length and Transfer-Encoding. It reads
// only the first bytes of each line; body lines that look like a request
// head (a request line, both headers, an empty line) also mark it, which
// costs that client one new connection.
type framingConn struct {
	net.Conn
	ambiguous atomic.Bool

	line   [24]byte // the current line's first bytes
	n      int      // how many of them
	inHead bool     // between a request line and the empty line
	cl, te bool     // the current head's Content-Length, Transfer-Encoding

	raw syscall.RawConn // TCPConn's, once asked for
}

// NetConn returns the connection c wraps.
func (c *framingConn) NetConn() net.Conn { return c.Conn }

// Read reads, then scans what was read for request heads. net/http's
// server reads a connection from one goroutine at a time.
func (c *framingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.ambiguous.Load() {
		c.scan(p[:n])
	}
	return n, err
}

func (c *framingConn) scan(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		part := b
		if i >= 0 {
			part = b[:i]
		}
		c.n += copy(c.line[c.n:], part)
		if i < 0 {
			return
		}
		c.endLine(bytes.TrimSuffix(c.line[:c.n], []byte("\r")))
		c.n = 0
		b = b[i+1:]
	}
}

// endLine takes the first bytes of one whole line.
func (c *framingConn) endLine(line []byte) {
	switch {
	case len(line) == 0:
		if c.inHead && c.cl && c.te {
			c.ambiguous.Store(true)
		}
		c.inHead = false
	case !c.inHead:
		if isRequestLine(line) {
			c.inHead, c.cl, c.te = true, false, false
		}
	case hasPrefixFold(line, "content-length:"):
		c.cl = true
	case hasPrefixFold(line, "transfer-encoding:"):
		c.te = true
	}
}

// isRequestLine reports whether line starts as a request line does: an
// upper-case method, a space, then a target ("/…", "*", "http…").
func isRequestLine(line []byte) bool {
	i := 0
	for i < len(line) && line[i] >= 'A' && line[i] <= 'Z' {
		i++
	}
	return i > 0 && i+1 < len(line) && line[i] == ' ' && (line[i+1] == '/' || line[i+1] == '*' || line[i+1] == 'h')
}

func hasPrefixFold(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && bytes.EqualFold(b[:len(prefix)], []byte(prefix))
}

type framingKey struct{}

// framingListener wraps each accepted connection in a framingConn.
type framingListener struct{ net.Listener }

func (l framingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &framingConn{Conn: c}, nil
}

// connContext is an http.Server's ConnContext: it keeps the connection's
// framingConn for closeAmbiguous.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*framingConn); ok {
		return context.WithValue(ctx, framingKey{}, fc)
	}
	return ctx
}

// closeAmbiguous answers a request whose connection carried both
// Content-Length and Transfer-Encoding with Connection: close, so the
// server closes it after the answer.
func closeAmbiguous(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fc, ok := r.Context().Value(framingKey{}).(*framingConn); ok && len(r.TransferEncoding) > 0 && fc.ambiguous.Load() {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}

// TCPConn returns the bare TCP connection of the request whose context
// is ctx, and its raw access (made once per connection), when it was
// served by a Limits.Server on a Limits.Listener and nothing but
// httplimit's own wrappers lies over it (no TLS): what a handler writes
// below net/http's response writer (the gateway's streamed answers) goes
// to it. false otherwise. net/http serves a connection's requests one
// after another on one goroutine, which alone calls it.
func TCPConn(ctx context.Context) (*net.TCPConn, syscall.RawConn, bool) {
	fc, ok := ctx.Value(framingKey{}).(*framingConn)
	if !ok {
		return nil, nil, false
	}
	c := fc.Conn
	if lc, ok := c.(*limitConn); ok {
		c = lc.Conn
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil, nil, false
	}
	if fc.raw == nil {
		rc, err := tc.SyscallConn()
		if err != nil {
			return nil, nil, false
		}
		fc.raw = rc
	}
	return tc, fc.raw, true
}
