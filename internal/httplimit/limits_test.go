package httplimit

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/httplimit/httplimittest"
)

// serveLimits serves h under l on a loopback port until the test ends.
func serveLimits(t *testing.T, l Limits, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := l.Server(h)
	go func() { _ = srv.Serve(l.Listener(ln)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// TestStreamOutlivesBodyTimeout: the body deadline covers only the body.
// An answer streamed for several body timeouts after the body was read is
// neither cut nor cancelled.
func TestStreamOutlivesBodyTimeout(t *testing.T) {
	const bodyTimeout = 200 * time.Millisecond
	cancelled := make(chan bool, 1)
	addr := serveLimits(t, Limits{BodyTimeout: bodyTimeout}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			t.Errorf("reading the body: %v", err)
			return
		}
		rc := http.NewResponseController(w)
		for i := range 8 {
			select {
			case <-r.Context().Done():
				cancelled <- true
				return
			case <-time.After(bodyTimeout / 2):
			}
			fmt.Fprintf(w, "chunk %d\n", i)
			_ = rc.Flush()
		}
		cancelled <- false
	}))
	resp, err := http.Post("http://"+addr+"/", "application/json", strings.NewReader(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("stream cut after %q: %v", b, err)
	}
	if n := strings.Count(string(b), "chunk"); n != 8 {
		t.Errorf("%d chunks, want 8: %q", n, b)
	}
	if <-cancelled {
		t.Error("the request's context was cancelled while the answer streamed")
	}
}

// TestUnreadBodyIsAbandonedAtTheDeadline: a handler that answers without
// reading the body does not let a client that never sends it hold the
// connection.
func TestUnreadBodyIsAbandonedAtTheDeadline(t *testing.T) {
	addr := serveLimits(t, Limits{BodyTimeout: 300 * time.Millisecond}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.NotFound(w, r)
	}))
	c, err := httplimittest.SlowBody(addr, "/nowhere", 1000, 28)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the answer (%d) the connection is still open: %v", resp.StatusCode, err)
	}
}

// TestBodyTimeoutError: a handler reading a body that stops arriving gets
// ErrBodyTimeout.
func TestBodyTimeoutError(t *testing.T) {
	got := make(chan error, 1)
	addr := serveLimits(t, Limits{BodyTimeout: 200 * time.Millisecond}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		got <- err
		w.WriteHeader(http.StatusRequestTimeout)
	}))
	c, err := httplimittest.SlowBody(addr, "/", 1000, 28)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case err := <-got:
		if !IsBodyTimeout(err) {
			t.Fatalf("body read error %v, want ErrBodyTimeout", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the body read did not end")
	}
}

// TestKeepAliveAfterBody: the deadline lifted at the body's end does not
// touch the connection's next request, sent after more than a body
// timeout.
func TestKeepAliveAfterBody(t *testing.T) {
	const bodyTimeout = 100 * time.Millisecond
	addr := serveLimits(t, Limits{BodyTimeout: bodyTimeout}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i := range 2 {
		if i > 0 {
			time.Sleep(3 * bodyTimeout)
		}
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok")
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(b) != "ok" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, b)
		}
	}
}

// TestSlowBodies is the attack of httplimittest on a bare server: 500
// slow clients are answered 408 and let go once the deadline passes.
func TestSlowBodies(t *testing.T) {
	if testing.Short() {
		t.Skip("holds 500 connections for the body timeout")
	}
	l := Limits{BodyTimeout: 5 * time.Second}
	addr := serveLimits(t, l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			if IsBodyTimeout(err) {
				w.Header().Set("Connection", "close")
				w.WriteHeader(http.StatusRequestTimeout)
			}
			return
		}
	}))
	httplimittest.SlowBodies{Addr: addr, Path: "/", Clients: 500, Wait: l.BodyTimeout + 30*time.Second,
		Normal: httplimittest.PostOK("http://"+addr+"/", "{}")}.Run(t)
}

// TestConnectionCap: with MaxConns connections open, the next one is not
// served until one of them closes.
func TestConnectionCap(t *testing.T) {
	const maxConns = 4
	addr := serveLimits(t, Limits{MaxConns: maxConns}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	var held []net.Conn
	for range maxConns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		held = append(held, c)
	}
	done := make(chan error, 1)
	go func() {
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + addr + "/")
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("served past the cap of %d connections (err %v)", maxConns, err)
	case <-time.After(300 * time.Millisecond):
	}
	held[0].Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("not served after a connection closed")
	}
}

// TestListenerCloseEndsWaitingAccept: closing a full listener ends the
// Accept waiting for a slot.
func TestListenerCloseEndsWaitingAccept(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ll := LimitListener(ln, 1)
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			defer c.Close()
			time.Sleep(time.Second)
		}
	}()
	c, err := ll.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	errc := make(chan error, 1)
	go func() { _, err := ll.Accept(); errc <- err }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = ll.Close()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("Accept succeeded on a closed listener")
		}
	case <-ctx.Done():
		t.Fatal("Accept still waiting after Close")
	}
}

func TestDefaultMaxConns(t *testing.T) {
	lim := openFileLimit()
	for _, per := range []int{0, 1, 2} {
		got := DefaultMaxConns(per)
		want := min(max((lim-reservedFDs)/max(per, 1), minDefaultConns), maxDefaultConns)
		if got != want || got < minDefaultConns || got > maxDefaultConns {
			t.Errorf("DefaultMaxConns(%d) = %d with a limit of %d descriptors, want %d", per, got, lim, want)
		}
	}
	l := Limits{}.WithDefaults(2)
	if l.ReadHeaderTimeout != DefaultReadHeaderTimeout || l.BodyTimeout != DefaultBodyTimeout ||
		l.IdleTimeout != DefaultIdleTimeout || l.MaxConns != DefaultMaxConns(2) {
		t.Errorf("defaults %+v", l)
	}
}
