package staleconn

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"syscall"
)

// Transport resends, once and on a fresh connection, a request that met a
// pooled connection its server had already closed (the package comment
// says when). It is safe for concurrent use.
type Transport struct {
	// Pooled is the transport requests go through first.
	Pooled http.RoundTripper
	// Fresh is the transport of the resend: one that opens a connection
	// and does not pool it (New's is a clone of Pooled's with keep-alives
	// off). nil: Pooled.
	Fresh http.RoundTripper
	// OnResend, when set, is called before each resend (a counter).
	OnResend func()
}

// New wraps t: its resends go through a clone of t with keep-alives off.
func New(t *http.Transport) *Transport {
	f := t.Clone()
	f.DisableKeepAlives = true
	return &Transport{Pooled: t, Fresh: f}
}

// traced is one round trip's trace: the transport's own hooks, which
// note what it needs to decide a resend, then the caller's.
type traced struct {
	reused    atomic.Bool // the last connection it got was a pooled one
	firstByte atomic.Bool // a byte of the response arrived
	caller    *httptrace.ClientTrace
	trace     httptrace.ClientTrace // the caller's hooks with GotConn and GotFirstResponseByte wrapped
}

// newTraced makes the trace of a round trip, the caller's hooks (nil:
// none) called after the transport's.
func newTraced(caller *httptrace.ClientTrace) *traced {
	t := &traced{caller: caller}
	if caller != nil {
		t.trace = *caller
	}
	t.trace.GotConn = t.gotConn
	t.trace.GotFirstResponseByte = t.gotFirstByte
	return t
}

func (t *traced) gotConn(i httptrace.GotConnInfo) {
	t.reused.Store(i.Reused)
	if t.caller != nil && t.caller.GotConn != nil {
		t.caller.GotConn(i)
	}
}

func (t *traced) gotFirstByte() {
	t.firstByte.Store(true)
	if t.caller != nil && t.caller.GotFirstResponseByte != nil {
		t.caller.GotFirstResponseByte()
	}
}

// tracedKey is the context key of a round trip's trace (WithClientTrace).
type tracedKey struct{}

// WithClientTrace returns ctx for one request (one context per request)
// carrying trace: a Transport calls trace's hooks from its own trace
// (after its own work in the two hooks both use, GotConn and
// GotFirstResponseByte), on the first try and on a resend. The one trace
// is installed when the request is made, so that the round trip neither
// copies the request for another context nor composes two traces: a
// trace installed with httptrace.WithClientTrace works as well, but
// net/http composes two traces by reflection, and every hook both set is
// then called through reflect.Value.Call, a cost on every request of the
// caller's hot path. A request sent another way than through a Transport
// sees the caller's hooks all the same.
func WithClientTrace(ctx context.Context, trace *httptrace.ClientTrace) context.Context {
	t := newTraced(trace)
	return context.WithValue(httptrace.WithClientTrace(ctx, &t.trace), tracedKey{}, t)
}

// RoundTrip sends req through Pooled and resends it through Fresh when the
// pooled connection proved stale.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	tr, ok := req.Context().Value(tracedKey{}).(*traced)
	sent := req
	if !ok {
		// No WithClientTrace: the transport's hooks alone, on a copy of
		// the request (the resend is made from req, without them).
		tr = newTraced(nil)
		sent = req.WithContext(httptrace.WithClientTrace(req.Context(), &tr.trace))
	}
	resp, err := t.Pooled.RoundTrip(sent)
	if err == nil || !tr.reused.Load() || tr.firstByte.Load() || !Dropped(err) || req.Context().Err() != nil {
		return resp, err
	}
	// The resend's connection and first byte reach the caller's trace
	// through req's context (WithClientTrace).
	again := req.Clone(req.Context())
	if req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			return resp, err // the body cannot be sent again
		}
		b, berr := req.GetBody()
		if berr != nil {
			return resp, err
		}
		again.Body = b
	}
	if t.OnResend != nil {
		t.OnResend()
	}
	fresh := t.Fresh
	if fresh == nil {
		fresh = t.Pooled
	}
	return fresh.RoundTrip(again)
}

// CloseIdleConnections closes the idle connections of both transports.
func (t *Transport) CloseIdleConnections() {
	for _, rt := range []http.RoundTripper{t.Pooled, t.Fresh} {
		if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
		}
	}
}

// serverClosedIdle is net/http's errServerClosedIdle, which it does not
// export: the connection's reader saw the server's end of file while no
// request was waiting on it.
const serverClosedIdle = "http: server closed idle connection"

// Dropped reports whether err, a round trip's error, says the server
// closed or reset the connection: net/http's "server closed idle
// connection", end of file, a reset or a broken pipe. Whether the
// connection was a pooled one, and whether any byte of answer arrived
// first, the caller knows (Transport asks both).
func Dropped(err error) bool {
	if err == nil {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		strings.Contains(err.Error(), serverClosedIdle)
}
