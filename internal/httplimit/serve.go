package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// DefaultGrace is how long requests in flight may finish after a stop
// when Stop.Grace is zero.
const DefaultGrace = 10 * time.Second

// ErrGraceExpired is the error (wrapped) Serve returns when requests were
// still in flight at the end of the grace: their connections were closed.
var ErrGraceExpired = errors.New("the grace expired with requests in flight; their connections were closed")

// Stop is how a server stops once its context ends.
type Stop struct {
	// Grace is how long requests in flight may then finish (DefaultGrace
	// when 0); past it their connections are closed.
	Grace time.Duration
	// Stopping, when set, runs first, while the server still accepts
	// requests: the gateway's drain (/health at 503 for its drain delay),
	// serve's engine stop (unfinished requests end with "abort").
	Stopping func()
}

// Serve is the one lifecycle of this module's servers (serve, the app,
// the gateway): it serves h on ln with l's deadlines and connection cap
// until ctx ends, then runs stop.Stopping, stops accepting connections and
// lets the requests in flight, streams included, finish within the grace.
// Connections without a request in progress do not hold it up. It returns
// once the server has stopped and every connection is closed: nil, the
// server's own failure, or ErrGraceExpired (wrapped) when requests had to
// be cut.
func (l Limits) Serve(ctx context.Context, ln net.Listener, h http.Handler, stop Stop) error {
	srv := l.Server(h)
	var active activeConns
	srv.ConnState = active.track
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l.Listener(ln)) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err) // never ErrServerClosed: only Serve's caller shuts it down
	case <-ctx.Done():
	}
	if stop.Stopping != nil {
		stop.Stopping()
	}
	grace := stop.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	// Shutdown waits for connections to go idle, and for those a client
	// opened without sending a request for up to 5 s; once no response is
	// in progress there is nothing left to wait for.
	idle := make(chan struct{})
	go func() {
		defer close(idle)
		active.waitNone(sctx)
	}()
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(sctx) }()
	var err error
	select {
	case err = <-done:
	case <-idle:
		if sctx.Err() == nil {
			err = nil // nothing in flight: the rest are idle connections
		} else {
			err = <-done
		}
	}
	inFlight := active.count()
	cancel()
	_ = srv.Close()
	served := <-errc // ErrServerClosed, unless the server failed meanwhile
	if err != nil && inFlight > 0 {
		return fmt.Errorf("shutdown: after %v: %w", grace, ErrGraceExpired)
	}
	if !errors.Is(served, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", served)
	}
	return nil
}

// activeConns follows the connections with a response in progress (from
// the request's first byte until its response is written).
type activeConns struct {
	mu     sync.Mutex
	active map[net.Conn]bool
}

func (a *activeConns) track(c net.Conn, st http.ConnState) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if st == http.StateActive {
		if a.active == nil {
			a.active = map[net.Conn]bool{}
		}
		a.active[c] = true
	} else {
		delete(a.active, c)
	}
}

func (a *activeConns) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.active)
}

// waitNone returns when no response is in progress, or when ctx ends.
func (a *activeConns) waitNone(ctx context.Context) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for a.count() > 0 {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
