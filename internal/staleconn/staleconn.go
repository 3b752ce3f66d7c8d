package staleconn

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
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
	// LearnAfter is how many stale pooled connections in a row (resends,
	// with no answer on a reused connection between them) teach the
	// Transport that a host closes every connection after its answer:
	// its requests then go through Fresh up front (Connection: close,
	// a new connection, no failed try first), but for a pair through
	// Pooled every ProbeEvery requests, which unlearns it when the
	// second is answered on the first's connection. 0: DefaultLearnAfter;
	// negative: never learn. No learning without a Fresh transport.
	LearnAfter int

	tracked atomic.Int32 // len(hosts): requests take no lock while it is 0
	mu      sync.Mutex
	hosts   map[string]*hostState
}

// DefaultLearnAfter is Transport.LearnAfter's default.
const DefaultLearnAfter = 3

// ProbeEvery is how often (in requests) a host learned to close its
// connections is tried on pooled connections again.
const ProbeEvery = 256

// hostState is what a Transport learned of one host's connections.
type hostState struct {
	stale   int   // stale pooled connections in a row
	closing bool  // the host closes every connection after its answer
	sent    int64 // requests sent since it was learned
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
	host := req.URL.Host
	if t.freshFirst(host) {
		return t.Fresh.RoundTrip(req) // the caller's trace, if any, is in req's context
	}
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
		if err == nil && tr.reused.Load() {
			t.learn(host, false) // the host keeps its connections open
		}
		return resp, err
	}
	t.learn(host, true)
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

// freshFirst reports whether a request to host goes through Fresh up
// front: the host was learned to close its connections, and this is not
// one of a probe's two requests (the last two of every ProbeEvery).
func (t *Transport) freshFirst(host string) bool {
	if t.Fresh == nil || t.LearnAfter < 0 || t.tracked.Load() == 0 {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.hosts[host]
	if h == nil || !h.closing {
		return false
	}
	n := h.sent
	h.sent++
	return n%ProbeEvery < ProbeEvery-2
}

// learn records what a pooled request to host met: a stale connection,
// or an answer on a reused one.
func (t *Transport) learn(host string, stale bool) {
	if t.Fresh == nil || t.LearnAfter < 0 || !stale && t.tracked.Load() == 0 {
		return // the common case: a host whose connections stay open
	}
	after := t.LearnAfter
	if after == 0 {
		after = DefaultLearnAfter
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.hosts[host]
	if h == nil {
		if !stale {
			return
		}
		if t.hosts == nil {
			t.hosts = map[string]*hostState{}
		}
		h = &hostState{}
		t.hosts[host] = h
		t.tracked.Store(int32(len(t.hosts)))
	}
	if !stale {
		delete(t.hosts, host)
		t.tracked.Store(int32(len(t.hosts)))
		return
	}
	h.stale++
	if h.stale >= after && !h.closing {
		h.closing, h.sent = true, 0
	}
}

// Closing reports whether the Transport learned that host (host:port, a
// request URL's Host) closes every connection after its answer.
func (t *Transport) Closing(host string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.hosts[host]
	return h != nil && h.closing
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
