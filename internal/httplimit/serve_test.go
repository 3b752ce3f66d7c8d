package httplimit

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// served runs Limits.Serve on a loopback port; the result arrives on the
// returned channel.
func served(t *testing.T, ctx context.Context, h http.Handler, stop Stop) (string, <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Limits{}.WithDefaults(1).Serve(ctx, ln, h, stop) }()
	return "http://" + ln.Addr().String(), done
}

func result(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("Serve did not return")
		return nil
	}
}

// TestServeDrainsTheRequestInFlight: after the stop, the request in
// flight finishes (its answer whole), Stopping ran while the server still
// answered, and Serve returns nil.
func TestServeDrainsTheRequestInFlight(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	started, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			<-release
		}
		_, _ = io.WriteString(w, "whole")
	})
	var base string
	stoppingGot := make(chan string, 1)
	stop := Stop{Grace: 10 * time.Minute, Stopping: func() {
		// Still accepting: a new request is answered.
		resp, err := http.Get(base + "/fast")
		if err != nil {
			stoppingGot <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		stoppingGot <- string(b)
		close(release)
	}}
	base, done := served(t, ctx, h, stop)
	answer := make(chan string, 1)
	go func() {
		resp, err := http.Get(base + "/slow")
		if err != nil {
			answer <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answer <- string(b)
	}()
	<-started
	cancel()
	if err := result(t, done); err != nil {
		t.Errorf("Serve: %v, want nil after a drain in time", err)
	}
	if got := <-stoppingGot; got != "whole" {
		t.Errorf("a request during Stopping: %q", got)
	}
	if got := <-answer; got != "whole" {
		t.Errorf("the request in flight got %q, want its whole answer", got)
	}
}

// TestServeCutsAfterTheGrace: a request still running when the grace
// expires has its connection closed and Serve says so.
func TestServeCutsAfterTheGrace(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	started, never := make(chan struct{}), make(chan struct{})
	defer close(never)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		_ = http.NewResponseController(w).Flush()
		close(started)
		select {
		case <-never:
		case <-r.Context().Done():
		}
	})
	base, done := served(t, ctx, h, Stop{Grace: 50 * time.Millisecond})
	cut := make(chan error, 1)
	go func() {
		resp, err := http.Get(base)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		cut <- err
	}()
	<-started
	cancel()
	if err := result(t, done); !errors.Is(err, ErrGraceExpired) {
		t.Errorf("Serve: %v, want ErrGraceExpired", err)
	}
	if err := <-cut; err == nil {
		t.Error("the request outlasting the grace ended cleanly")
	}
}

// TestIdleConnectionsDoNotHoldTheStop: a keep-alive connection with no
// request, and one opened without a byte sent, do not make Serve wait for
// the grace, nor count as requests cut.
func TestIdleConnectionsDoNotHoldTheStop(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	base, done := served(t, ctx, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), Stop{Grace: 10 * time.Minute})
	resp, err := http.Get(base) // leaves an idle keep-alive connection
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	c, err := net.Dial("tcp", base[len("http://"):]) // a connection without a request
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cancel()
	if err := result(t, done); err != nil {
		t.Errorf("Serve: %v, want nil", err)
	}
}

// TestServeFailure: a listener that fails ends Serve with its error at
// once, without a stop.
func TestServeFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	err = Limits{}.Serve(context.Background(), ln, http.NotFoundHandler(), Stop{})
	if err == nil || errors.Is(err, ErrGraceExpired) {
		t.Errorf("Serve on a closed listener: %v", err)
	}
}
