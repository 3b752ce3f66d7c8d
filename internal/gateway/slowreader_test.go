package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/openaitest"
)

// openSilentClient sends a streaming request to the gateway at srv over a
// raw connection and reads nothing: a client that stopped reading.
func openSilentClient(t *testing.T, srv *httptest.Server, model string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.(*net.TCPConn).SetReadBuffer(16 << 10) // its socket fills soon
	body := chatBody(model, true, "x", "")
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	return c
}

// startWatchedGateway starts g as startGateway does and counts the
// client connections it has closed.
func startWatchedGateway(t *testing.T, g *Gateway) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var closed atomic.Int64
	srv := newLimitsServer(g)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed || s == http.StateHijacked {
			closed.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(func() { srv.Close(); g.Close() })
	return srv, &closed
}

// closesSoon reports whether the gateway closes its connection to c
// within limit, c read meanwhile as fast as it goes. The gateway's side
// is what counts: a client whose window stayed shut may see the end of
// a connection its peer has closed only after the kernel's window probes.
func closesSoon(c net.Conn, closed *atomic.Int64, limit time.Duration) bool {
	go func() { _, _ = io.Copy(io.Discard, c) }() // ends with the test's c.Close
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if closed.Load() > 0 {
			return true
		}
	}
	return false
}

// TestSlowReaderIsCut: a client that stops reading an answer larger than
// the sockets hold is cut after server.send_timeout, and its pool slot is
// given back; the upstream is cancelled.
func TestSlowReaderIsCut(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{Endless: 256 << 20})
	g := mustGateway(t, "server: {send_timeout: 300ms}\npools: [{name: p, queue: {concurrency: 1, max_size: 4}, replicas: [{url: "+up.URL()+"}]}]\nroutes: [{model: \"*\", pool: p}]\n")
	srv, closed := startWatchedGateway(t, g)
	c := openSilentClient(t, srv, "m")
	waitFor(t, "the stream to start", func() bool { return up.Active.Load() == 1 })
	waitFor(t, "the slow reader's slot to be given back", func() bool { _, in, _ := poolState(g, "p"); return in == 0 })
	waitFor(t, "the upstream to be cancelled", func() bool { return up.Active.Load() == 0 })
	if !closesSoon(c, closed, 10*time.Second) {
		t.Fatal("the slow reader's connection was not closed")
	}
}

// TestTotalTimeoutCutsASilentClient: the route's total timeout ends a
// stream whose client does not read: the slot is given back at once and
// the connection closed within the grace, not when the client reads on.
// A try whose total expired before the sockets' buffers filled (a slow
// machine: the stream ended with its error event, no write blocked)
// proves nothing and is run again with a longer total.
func TestTotalTimeoutCutsASilentClient(t *testing.T) {
	for total := 400 * time.Millisecond; ; total *= 4 {
		if silentClientCut(t, total) {
			return
		}
		if total >= 1600*time.Millisecond {
			t.Fatal("no try filled the sockets' buffers before its total timeout")
		}
	}
}

// silentClientCut runs one try of TestTotalTimeoutCutsASilentClient; false
// when the stream ended before any write blocked.
func silentClientCut(t *testing.T, total time.Duration) bool {
	up := openaitest.Start(t, &openaitest.Upstream{Endless: 1 << 30})
	g := mustGateway(t, fmt.Sprintf("pools: [{name: p, queue: {concurrency: 1, max_size: 4}, replicas: [{url: %s}]}]\nroutes: [{model: \"*\", pool: p, timeouts: {total: %s}}]\n", up.URL(), total))
	srv, closed := startWatchedGateway(t, g)
	c := openSilentClient(t, srv, "m")
	waitFor(t, "the stream to start", func() bool { return up.Active.Load() == 1 })
	waitFor(t, "the slot to be given back at the total timeout", func() bool { _, in, _ := poolState(g, "p"); return in == 0 })
	cut := func() float64 { return testutil.ToFloat64(g.Metrics.Requests.WithLabelValues("p", "*", "499")) }
	whole := func() float64 { return testutil.ToFloat64(g.Metrics.Requests.WithLabelValues("p", "*", "504")) }
	waitFor(t, "the request to end", func() bool { return cut()+whole() == 1 })
	if whole() == 1 {
		return false
	}
	if !closesSoon(c, closed, 10*time.Second) {
		t.Fatal("the silent client's connection was not closed")
	}
	return true
}

// TestSendTimeoutSetting: server.send_timeout defaults to nginx's 60 s
// and refuses a negative value.
func TestSendTimeoutSetting(t *testing.T) {
	const pools = "pools: [{name: p, replicas: [{url: \"http://h:1\"}]}]\n"
	cfg, err := ParseConfig([]byte(pools))
	if err != nil || cfg.Server.SendTimeout.D() != DefaultSendTimeout || DefaultSendTimeout != time.Minute {
		t.Fatalf("default send_timeout %v (%v), want 60s", cfg.Server.SendTimeout, err)
	}
	cfg.Server.SendTimeout = Duration(-time.Second)
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "server.send_timeout") {
		t.Fatalf("a negative send_timeout: %v, want an error naming server.send_timeout", err)
	}
}

// slowOrNormal answers model "big" with an endless stream of 16 KiB
// chunks (more than the sockets hold) and anything else as normal does;
// big counts the big answers begun.
func slowOrNormal(normal http.Handler, big *atomic.Int64) http.Handler {
	chunk := `data: {"choices":[{"index":0,"delta":{"content":"` + strings.Repeat("x", 16<<10) + `"}}]}` + "\n\n"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !bytes.Contains(body, []byte(`"model":"big"`)) {
			r.Body = io.NopCloser(bytes.NewReader(body))
			normal.ServeHTTP(w, r)
			return
		}
		big.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		for r.Context().Err() == nil {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
	})
}

// smallSendBuffers gives each connection it accepts a 16 KiB send
// buffer: a client that stops reading holds back the gateway's writes
// after what its queue holds and little more, on any machine's socket
// settings.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := httplimit.NetConn(c).(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(16 << 10)
	}
	return c, err
}

// TestSlowReadersLeaveOthersTTFT: 200 streams of which 20 stop reading
// answers larger than the sockets hold, on a pool of 20 slots: the other
// 180 streams' TTFT stays within the bounds of the same 180 streams run
// without the slow readers (P90 within 4× of the greater of two same-test
// baselines, one before and one after): the slow readers are cut after
// send_timeout and their slots given back.
func TestSlowReadersLeaveOthersTTFT(t *testing.T) {
	if testing.Short() {
		t.Skip("400 streams")
	}
	var big atomic.Int64
	up := httptest.NewServer(slowOrNormal(benchUpstream(10, 20*time.Millisecond), &big))
	defer up.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4096, DisableCompression: true}, Timeout: time.Minute}
	defer client.CloseIdleConnections()
	run := func(slow int) streamStats {
		g := mustGateway(t, "server: {send_timeout: 1s}\npools: [{name: p, queue: {concurrency: 20, max_size: 400}, replicas: [{url: "+up.URL+"}]}]\nroutes: [{model: \"*\", pool: p}]\n")
		srv := newLimitsServer(g)
		srv.Listener = smallSendBuffers{srv.Listener}
		srv.Start()
		defer func() { srv.Close(); g.Close() }()
		big.Store(0)
		for range slow {
			openSilentClient(t, srv, "big")
		}
		waitFor(t, "the slow readers' answers to begin", func() bool { return big.Load() == int64(slow) })
		return runStreams(client, srv.URL, 180, false)
	}
	// The runs without slow readers come before and after the one with
	// them: a machine whose load changes meanwhile (other work on it)
	// moves the bound with it.
	before := run(0)
	with := run(20)
	after := run(0)
	if before.errors+with.errors+after.errors > 0 || len(before.ttfb)+len(with.ttfb)+len(after.ttfb) != 3*180 {
		t.Fatalf("errors: %d and %d without the slow readers, %d with them; want none", before.errors, after.errors, with.errors)
	}
	b90, w90 := max(pct(before.ttfb, 90), pct(after.ttfb, 90)), pct(with.ttfb, 90)
	t.Logf("TTFT of 180 streams, P50/P90: %v/%v and %v/%v without 20 slow readers, %v/%v with them",
		pct(before.ttfb, 50), pct(before.ttfb, 90), pct(after.ttfb, 50), pct(after.ttfb, 90), pct(with.ttfb, 50), w90)
	if w90 > 4*b90 {
		t.Errorf("P90 TTFT %v with 20 slow readers, over 4× the %v without them", w90, b90)
	}
}

// pipeListener hands the server one end of an in-memory pipe per
// connection dialled (net.Pipe: no socket buffers, a write waits for the
// other end's read), so that a client that reads nothing holds back the
// server's very first write.
type pipeListener struct {
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// dial returns the client's end of a new connection.
func (l *pipeListener) dial(t *testing.T) net.Conn {
	srv, cli := net.Pipe()
	select {
	case l.conns <- srv:
	case <-time.After(5 * time.Second):
		t.Fatal("the server accepted no connection")
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestSlotGivenBackWhenTheAnswerEnds: a client that reads nothing (no
// byte buffered anywhere on its way) does not hold its pool slot once the
// upstream's answer has ended, well before send_timeout: the slot is the
// upstream's. The client, reading afterwards, still gets the whole
// answer, [DONE] included.
func TestSlotGivenBackWhenTheAnswerEnds(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{Chunks: 2000})
	g := mustGateway(t, "server: {send_timeout: 1m}\npools: [{name: p, queue: {concurrency: 1, max_size: 4}, replicas: [{url: "+up.URL()+"}]}]\nroutes: [{model: \"*\", pool: p}]\n")
	defer g.Close()
	ln := newPipeListener()
	srv := httptest.NewUnstartedServer(g)
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	c := ln.dial(t)
	body := chatBody("m", true, "x", "")
	go fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	waitFor(t, "the upstream to serve the request", func() bool { return up.Served.Load() == 1 })
	waitFor(t, "the slot to be given back while the client has read nothing", func() bool { _, in, _ := poolState(g, "p"); return in == 0 })
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("reading the answer: %v", err)
	}
	if n := bytes.Count(got, []byte(`"content":"t`)); n != 2000 || !bytes.Contains(got, []byte("data: [DONE]")) {
		t.Fatalf("the client read %d content chunks of 2000 (%d bytes), [DONE] %v", n, len(got), bytes.Contains(got, []byte("data: [DONE]")))
	}
}
