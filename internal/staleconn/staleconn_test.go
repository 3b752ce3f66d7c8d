package staleconn

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/tokentrace/tokentrace/internal/staleconn/staleconntest"
)

// start starts a test server and returns its chat completions URL.
func start(t *testing.T, m staleconntest.Mode) string {
	return staleconntest.Start(t, m) + "/v1/chat/completions"
}

// post sends one streamed request through rt and reads its answer whole.
func post(rt http.RoundTripper, url string) error {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader(`{"stream":true}`))
	if err != nil {
		return err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if !strings.HasSuffix(string(b), "[DONE]\n\n") {
		return fmt.Errorf("answer cut short: %q", b)
	}
	return nil
}

// newTransport is New's transport counting its resends; it learns no host
// (the tests of the resend itself), newLearning's does.
func newTransport() (*Transport, *atomic.Int64) {
	t, resent := newLearning()
	t.LearnAfter = -1
	return t, resent
}

func newLearning() (*Transport, *atomic.Int64) {
	var resent atomic.Int64
	t := New(&http.Transport{MaxIdleConnsPerHost: 64})
	t.OnResend = func() { resent.Add(1) }
	return t, &resent
}

// A server that closes after every streamed answer though it says
// keep-alive: four closed-loop workers, 400 requests, none failed. How
// many met a closed connection is a race (the server's FIN against the
// next request); every one that did was resent.
func TestServerClosingAfterEachAnswer(t *testing.T) {
	url := start(t, staleconntest.CloseAfterAnswer)
	tr, resent := newTransport()
	defer tr.CloseIdleConnections()
	var failed atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				if err := post(tr, url); err != nil {
					failed.Add(1)
					t.Errorf("request failed: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("400 requests, %d failed, %d resent", failed.Load(), resent.Load())
}

// A server that reads a connection's second request and closes without
// answering: every such request is resent, once, on a fresh connection.
// One worker, 100 requests: the first on each connection is answered, the
// second resent, so exactly 50 resends and no failure.
func TestStaleConnectionResentOnce(t *testing.T) {
	url := start(t, staleconntest.DiscardSecond)
	tr, resent := newTransport()
	defer tr.CloseIdleConnections()
	for i := 0; i < 100; i++ {
		if err := post(tr, url); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if resent.Load() != 50 {
		t.Errorf("%d resends, want 50", resent.Load())
	}
}

// Without the wrapper the same server fails those requests: the test
// server does reproduce the stale connection.
func TestStaleConnectionFailsWithoutResend(t *testing.T) {
	url := start(t, staleconntest.DiscardSecond)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	if err := post(tr, url); err != nil {
		t.Fatal(err)
	}
	err := post(tr, url)
	if err == nil || !Dropped(err) {
		t.Errorf("second request on the connection: %v, want the connection dropped before any answer", err)
	}
}

// A server that resets a connection's second request without answering
// (as one closing after its answer does when the next request is already
// in its buffer): resent, like a close.
func TestResetBeforeAnswerResent(t *testing.T) {
	url := start(t, staleconntest.ResetSecond)
	tr, resent := newTransport()
	defer tr.CloseIdleConnections()
	for i := 0; i < 10; i++ {
		if err := post(tr, url); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if resent.Load() != 5 {
		t.Errorf("%d resends, want 5", resent.Load())
	}
}

// The server had the request — a byte of answer came — or the connection
// was fresh: real failures. A server that resets every request gets one
// resend of a request on a pooled connection, never two, and no resend of
// one on a fresh connection.
func TestRealFailuresNotResent(t *testing.T) {
	url := start(t, staleconntest.CutSecond)
	tr, resent := newTransport()
	defer tr.CloseIdleConnections()
	if err := post(tr, url); err != nil {
		t.Fatal(err)
	}
	if err := post(tr, url); err == nil || resent.Load() != 0 {
		t.Errorf("cut after the first byte: err %v, %d resends; want a failure, none", err, resent.Load())
	}

	url = start(t, staleconntest.ResetAll)
	tr, resent = newTransport()
	defer tr.CloseIdleConnections()
	if err := post(tr, url); err == nil || resent.Load() != 0 {
		t.Errorf("reset on a fresh connection: err %v, %d resends; want a failure, none", err, resent.Load())
	}
}

func TestDropped(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{io.EOF, true},
		{fmt.Errorf("net/http: Transport failed to read from server: %w", io.EOF), true},
		{fmt.Errorf("Post %q: %s", "u", serverClosedIdle), true},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{fmt.Errorf("write: %w", syscall.EPIPE), true},
		{io.ErrUnexpectedEOF, false},
		{context.DeadlineExceeded, false},
	} {
		if got := Dropped(c.err); got != c.want {
			t.Errorf("Dropped(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// A caller's trace (WithClientTrace) sees every connection and first
// byte: on a server that drops each connection's second request, the
// second request gets two connections (the stale one, then the resend's)
// and one first byte; the transport's own hooks still decide the resend.
func TestCallerTraceSeesTheResend(t *testing.T) {
	url := start(t, staleconntest.DiscardSecond)
	tr, resent := newTransport()
	defer tr.CloseIdleConnections()
	for i, want := range []struct{ conns, reused, first int64 }{{1, 0, 1}, {2, 1, 1}} {
		var conns, reused, first atomic.Int64
		ctx := WithClientTrace(context.Background(), &httptrace.ClientTrace{
			GotConn: func(c httptrace.GotConnInfo) {
				conns.Add(1)
				if c.Reused {
					reused.Add(1)
				}
			},
			GotFirstResponseByte: func() { first.Add(1) },
		})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if got := [3]int64{conns.Load(), reused.Load(), first.Load()}; got != [3]int64{want.conns, want.reused, want.first} {
			t.Errorf("request %d: connections, reused, first bytes = %v, want %v", i+1, got, want)
		}
	}
	if resent.Load() != 1 {
		t.Errorf("%d resends, want 1", resent.Load())
	}
}

// A host that drops every connection's second request: after
// DefaultLearnAfter resends in a row the transport sends its requests on
// fresh connections up front, so no more resends but one per probe pair
// (every ProbeEvery requests: the pair's second meets the stale
// connection again). One worker, 600 requests: 3 resends, then two
// probes' 2.
func TestLearnsHostThatClosesItsConnections(t *testing.T) {
	url := start(t, staleconntest.DiscardSecond)
	tr, resent := newLearning()
	defer tr.CloseIdleConnections()
	host := strings.TrimPrefix(strings.TrimSuffix(url, "/v1/chat/completions"), "http://")
	for i := 0; i < 600; i++ {
		if err := post(tr, url); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if i == 5 && !tr.Closing(host) {
			t.Errorf("after %d resends in a row the host is not learned", resent.Load())
		}
	}
	if want := int64(DefaultLearnAfter + 2); resent.Load() != want {
		t.Errorf("%d resends, want %d", resent.Load(), want)
	}
}

// fakeRoundTripper answers as scripted: err (on a connection it reports
// reused, as a stale pooled one) or a 200 on a reused connection.
type fakeRoundTripper struct {
	stale bool
	calls int
}

func (f *fakeRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	f.calls++
	if tr := httptrace.ContextClientTrace(req.Context()); tr != nil && tr.GotConn != nil {
		tr.GotConn(httptrace.GotConnInfo{Reused: true})
	}
	if f.stale {
		return nil, io.EOF
	}
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req}, nil
}

// A learned host that keeps its connections open again is unlearned at
// the next probe: the probe's requests go through Pooled, are answered on
// a reused connection, and every request after goes through Pooled again.
// Requests to other hosts are not affected by what one host taught.
func TestProbeUnlearnsHostThatKeepsItsConnections(t *testing.T) {
	pooled, fresh := &fakeRoundTripper{stale: true}, &fakeRoundTripper{}
	tr := &Transport{Pooled: pooled, Fresh: fresh, LearnAfter: 2}
	send := func(url string) {
		t.Helper()
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tr.RoundTrip(req); err != nil {
			t.Fatal(err)
		}
	}
	send("http://a/")
	send("http://a/")
	if !tr.Closing("a") || pooled.calls != 2 || fresh.calls != 2 {
		t.Fatalf("after 2 stale connections: closing %v, pooled %d, fresh %d calls", tr.Closing("a"), pooled.calls, fresh.calls)
	}
	pooled.stale = false
	send("http://b/")
	if tr.Closing("b") || pooled.calls != 3 {
		t.Errorf("another host: closing %v, pooled %d calls", tr.Closing("b"), pooled.calls)
	}
	for i := 0; i < ProbeEvery-2; i++ {
		send("http://a/")
	}
	if pooled.calls != 3 || !tr.Closing("a") {
		t.Fatalf("before the probe: pooled %d calls, closing %v", pooled.calls, tr.Closing("a"))
	}
	send("http://a/") // the probe: answered on a reused connection
	send("http://a/")
	if pooled.calls != 5 || tr.Closing("a") {
		t.Errorf("after the probe: pooled %d calls, closing %v", pooled.calls, tr.Closing("a"))
	}
}

// BenchmarkServerClosingAfterEachAnswer: one closed-loop client against a
// server that closes every connection after its answer though it says
// keep-alive (llama-server's way): each request resent after a failed try
// on the stale connection (resend), or sent on a fresh connection up front
// once the host is learned (learn). resends/op is the share of requests
// that paid a failed try; docs/bench.md has the figures.
func BenchmarkServerClosingAfterEachAnswer(b *testing.B) {
	for _, bc := range []struct {
		name       string
		learnAfter int
	}{{"resend", -1}, {"learn", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			url := staleconntest.Start(b, staleconntest.CloseAfterAnswer) + "/v1/chat/completions"
			tr, resent := newLearning()
			tr.LearnAfter = bc.learnAfter
			defer tr.CloseIdleConnections()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := post(tr, url); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(resent.Load())/float64(b.N), "resends/op")
		})
	}
}
