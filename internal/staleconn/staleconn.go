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

// attempt is what the transport's trace said of one round trip.
type attempt struct {
	reused    atomic.Bool // the last connection it got was a pooled one
	firstByte atomic.Bool // a byte of the response arrived
}

// traceKey is the context key of a caller's trace (WithClientTrace).
type traceKey struct{}

// WithClientTrace returns ctx carrying trace for requests sent through a
// Transport, which calls trace's hooks from its own trace (after its own
// work in the two hooks both use, GotConn and GotFirstResponseByte), on
// the first try and on a resend. A trace installed with
// httptrace.WithClientTrace works as well, but net/http composes two
// traces by reflection, and every hook both set is then called through
// reflect.Value.Call: a cost on every request of the caller's hot path.
// Only a Transport reads the trace: a request sent another way does not
// see it.
func WithClientTrace(ctx context.Context, trace *httptrace.ClientTrace) context.Context {
	return context.WithValue(ctx, traceKey{}, trace)
}

// traced is req's context with one trace: the transport's hooks for a,
// then the caller's (WithClientTrace), when it set one.
func traced(req *http.Request, a *attempt) (ctx context.Context, caller *httptrace.ClientTrace) {
	var tr httptrace.ClientTrace
	caller, _ = req.Context().Value(traceKey{}).(*httptrace.ClientTrace)
	if caller != nil {
		tr = *caller
	}
	gotConn, firstByte := tr.GotConn, tr.GotFirstResponseByte
	tr.GotConn = func(i httptrace.GotConnInfo) {
		a.reused.Store(i.Reused)
		if gotConn != nil {
			gotConn(i)
		}
	}
	tr.GotFirstResponseByte = func() {
		a.firstByte.Store(true)
		if firstByte != nil {
			firstByte()
		}
	}
	return httptrace.WithClientTrace(req.Context(), &tr), caller
}

// RoundTrip sends req through Pooled and resends it through Fresh when the
// pooled connection proved stale.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	a := &attempt{}
	ctx, caller := traced(req, a)
	resp, err := t.Pooled.RoundTrip(req.WithContext(ctx))
	if err == nil || !a.reused.Load() || a.firstByte.Load() || !Dropped(err) || req.Context().Err() != nil {
		return resp, err
	}
	rctx := req.Context()
	if caller != nil {
		rctx = httptrace.WithClientTrace(rctx, caller) // the resend's connection and first byte, to the caller
	}
	again := req.Clone(rctx)
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
