package httplimit

import (
	"net"
	"net/http"
	"time"

	"github.com/tokentrace/tokentrace/internal/field"
)

// Defaults of Limits' zero fields.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultBodyTimeout       = 30 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes = 64 << 10
)

// Limits are an HTTP server's deadlines and its connection cap. Zero
// fields take the defaults (WithDefaults).
type Limits struct {
	// ReadHeaderTimeout bounds the time from a connection's accept (or the
	// end of the previous answer) to the end of the request's headers.
	ReadHeaderTimeout time.Duration
	// BodyTimeout bounds the time from the end of the headers to the last
	// byte of the request body. A handler reading past it gets an error
	// that IsBodyTimeout recognizes (answer 408); a body still unread when
	// the handler returns is abandoned at the same instant and the
	// connection closed.
	BodyTimeout time.Duration
	// IdleTimeout bounds a keep-alive connection's wait for its next
	// request.
	IdleTimeout time.Duration
	// MaxConns caps the connections open at once; further connections
	// wait in the kernel's accept queue until one closes.
	MaxConns int
}

// Validate reports the first field of l that cannot work: a negative
// deadline or connection cap (which would switch the protection off). Zero
// fields are valid: they take the defaults.
func (l Limits) Validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"read_header_timeout", l.ReadHeaderTimeout}, {"body_timeout", l.BodyTimeout}, {"idle_timeout", l.IdleTimeout}} {
		if d.v < 0 {
			return field.Invalid(d.name, d.v, "must not be negative (0 takes the default)")
		}
	}
	if l.MaxConns < 0 {
		return field.Invalid("max_connections", l.MaxConns, "must not be negative (0: from the descriptor limit)")
	}
	return nil
}

// WithDefaults fills l's zero fields: the timeouts from the Default
// constants, MaxConns from DefaultMaxConns(fdsPerConn).
func (l Limits) WithDefaults(fdsPerConn int) Limits {
	if l.ReadHeaderTimeout == 0 {
		l.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if l.BodyTimeout == 0 {
		l.BodyTimeout = DefaultBodyTimeout
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.MaxConns == 0 {
		l.MaxConns = DefaultMaxConns(fdsPerConn)
	}
	return l
}

// Server returns an http.Server for h with l's header and idle deadlines,
// h wrapped by Handler for the body deadline and by closeAmbiguous. The caller serves it on
// Listener(ln) to cap the connections.
func (l Limits) Server(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           closeAmbiguous(l.Handler(h)),
		ConnContext:       connContext,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
	}
}

// Listener returns ln capped at l.MaxConns open connections (no cap when
// MaxConns is not positive), each connection watched for a request with
// both Content-Length and Transfer-Encoding (closed after its answer).
func (l Limits) Listener(ln net.Listener) net.Listener {
	if l.MaxConns <= 0 {
		return framingListener{ln}
	}
	return framingListener{LimitListener(ln, l.MaxConns)}
}
