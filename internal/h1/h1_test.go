package h1

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/staleconn/staleconntest"
)

// testIdleTimeout is the tests' idle connection timeout.
const testIdleTimeout = 90 * time.Second

// newTest is a Transport as the gateway configures it.
func newTest(dial func(ctx context.Context, network, addr string) (net.Conn, error), other http.RoundTripper) *Transport {
	return New(dial, other, Config{MaxIdlePerHost: 4096, IdleConnTimeout: testIdleTimeout, ReadBufferSize: 4 << 10, WriteBufferSize: 8 << 10})
}

// testH1 is a Transport with net/http's Transport for what
// is not plain http://.
func testH1(t *testing.T) *Transport {
	t.Helper()
	other := &http.Transport{DisableCompression: true}
	h := newTest((&net.Dialer{}).DialContext, other)
	t.Cleanup(h.CloseIdleConnections)
	return h
}

// connCounter counts the connections an httptest.Server accepted.
func connCounter(s *httptest.Server) *atomic.Int32 {
	var n atomic.Int32
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			n.Add(1)
		}
	}
	return &n
}

// h1Get sends one request through rt and reads its answer whole: its
// body, its Server-Timing trailer and whether its connection was a
// pooled one.
func h1Get(t *testing.T, rt http.RoundTripper, url string, readAll bool) (body, trailer string, reused bool) {
	t.Helper()
	var got httptrace.GotConnInfo
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { got = i }})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if !readAll {
		b := make([]byte, 4)
		_, _ = io.ReadFull(resp.Body, b)
		return string(b), "", got.Reused
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), resp.Trailer.Get("Server-Timing"), got.Reused
}

// A streamed (chunked) answer read to its end gives its connection back:
// the next requests reuse it (one connection for three), each body and
// trailer read as sent; an answer closed before its end, or one whose
// upstream said Connection: close, closes its connection (the next
// request opens one).
func TestH1ConnectionReuse(t *testing.T) {
	for _, tc := range []struct {
		name      string
		close     bool // the upstream answers Connection: close
		readAll   bool
		wantConns int32
		reused    []bool
	}{
		{name: "read whole", readAll: true, wantConns: 1, reused: []bool{false, true, true}},
		{name: "closed early", readAll: false, wantConns: 3, reused: []bool{false, false, false}},
		{name: "connection close", close: true, readAll: true, wantConns: 3, reused: []bool{false, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Trailer", "Server-Timing")
				if tc.close {
					w.Header().Set("Connection", "close")
				}
				for _, ev := range []string{"data: 1\n\n", "data: 2\n\n"} {
					_, _ = io.WriteString(w, ev)
					w.(http.Flusher).Flush()
				}
				w.Header().Set("Server-Timing", "prefill;dur=1.5")
			}))
			conns := connCounter(up)
			up.Start()
			defer up.Close()
			h := testH1(t)
			var reused []bool
			for range 3 {
				body, trailer, r := h1Get(t, h, up.URL+"/v1/chat/completions", tc.readAll)
				reused = append(reused, r)
				if tc.readAll && (body != "data: 1\n\ndata: 2\n\n" || trailer != "prefill;dur=1.5") {
					t.Fatalf("body %q trailer %q", body, trailer)
				}
			}
			if d := cmp.Diff(tc.reused, reused); d != "" {
				t.Errorf("reused (-want +got):\n%s", d)
			}
			if n := conns.Load(); n != tc.wantConns {
				t.Errorf("connections %d, want %d", n, tc.wantConns)
			}
		})
	}
}

// rawUpstream answers each connection's first request with answer, raw
// bytes, then closes the connection.
func rawUpstream(t testing.TB, answer []byte) string {
	t.Helper()
	return staleconntest.Serve(t, func(c *net.TCPConn) {
		defer c.Close()
		if req, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
			_, _ = io.Copy(io.Discard, req.Body)
			_, _ = c.Write(answer)
		}
	})
}

// An interim 100 Continue before the answer is skipped; the answer's
// status and body are the final ones.
func TestH1InterimAnswer(t *testing.T) {
	url := rawUpstream(t, []byte("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
	body, _, _ := h1Get(t, testH1(t), url+"/x", true)
	if body != "ok" {
		t.Errorf("body %q, want ok", body)
	}
}

// An upstream that closes the connection before answering fails the
// request with an end of file (staleconn.Dropped: what a resend needs).
func TestH1ClosedBeforeAnswer(t *testing.T) {
	url := rawUpstream(t, nil)
	req, _ := http.NewRequest(http.MethodPost, url+"/x", strings.NewReader("{}"))
	_, err := testH1(t).RoundTrip(req)
	if !errors.Is(err, io.EOF) {
		t.Errorf("err %v, want one wrapping io.EOF", err)
	}
}

// A request whose context ends while its answer is awaited, or while its
// body is read, returns the context's error (its connection's deadline
// set in the past).
func TestH1ContextEnds(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/body" {
			_, _ = io.WriteString(w, "data: 1\n\n")
			w.(http.Flusher).Flush()
		}
		<-release
	}))
	defer up.Close()
	defer close(release)
	h := testH1(t)
	t.Run("head", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, up.URL+"/head", strings.NewReader("{}"))
		errc := make(chan error, 1)
		go func() {
			_, err := h.RoundTrip(req)
			errc <- err
		}()
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("err %v, want context.Canceled", err)
		}
	})
	t.Run("body", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, up.URL+"/body", strings.NewReader("{}"))
		resp, err := h.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b := make([]byte, 9)
		if _, err := io.ReadFull(resp.Body, b); err != nil {
			t.Fatal(err)
		}
		cancel()
		if _, err := resp.Body.Read(b); !errors.Is(err, context.Canceled) {
			t.Errorf("err %v, want context.Canceled", err)
		}
	})
}

// recordingRT records that it was asked.
type recordingRT struct{ asked atomic.Int32 }

func (r *recordingRT) RoundTrip(*http.Request) (*http.Response, error) {
	r.asked.Add(1)
	return nil, errors.New("recorded")
}

// Anything but plain http:// (here https://) goes through the other
// transport.
func TestH1OtherSchemes(t *testing.T) {
	other := &recordingRT{}
	h := newTest((&net.Dialer{}).DialContext, other)
	req, _ := http.NewRequest(http.MethodGet, "https://127.0.0.1:1/x", nil)
	if _, err := h.RoundTrip(req); err == nil || other.asked.Load() != 1 {
		t.Errorf("err %v, other asked %d times: want the other transport's error, asked once", err, other.asked.Load())
	}
}

// An idle connection older than the idle timeout is closed, not reused.
func TestH1IdleTimeout(t *testing.T) {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	conns := connCounter(up)
	up.Start()
	defer up.Close()
	h := testH1(t)
	h1Get(t, h, up.URL, true)
	h.mu.Lock()
	for _, l := range h.idle {
		for _, pc := range l {
			pc.idleAt = pc.idleAt.Add(-2 * testIdleTimeout)
		}
	}
	h.mu.Unlock()
	if _, _, reused := h1Get(t, h, up.URL, true); reused || conns.Load() != 2 {
		t.Errorf("reused %v, connections %d: want a new connection", reused, conns.Load())
	}
}

// The answer Transport reads from any bytes an upstream sends is the one
// net/http's Transport reads from them: both fail, or both give the same
// status, body and trailer (the parser is net/http's, http.ReadResponse;
// what is Transport's own is the connection's life around it). Answers
// net/http's Transport treats apart (101, more than 5 interim answers) are
// skipped.
func FuzzH1Answer(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: Server-Timing\r\n\r\n9\r\ndata: 1\n\n\r\n0\r\nServer-Timing: a;dur=1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: [DONE]\n\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\nbody",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
		"garbage",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, answer []byte) {
		if skipAnswer(answer) {
			t.Skip()
		}
		// In-memory connections (no ports), each answering one request
		// with the fuzzed bytes.
		dial := func(context.Context, string, string) (net.Conn, error) { return pipeUpstream(answer), nil }
		other := &http.Transport{DisableCompression: true, DisableKeepAlives: true, DialContext: dial}
		defer other.CloseIdleConnections()
		h := newTest(dial, &recordingRT{})
		const url = "http://upstream.test/v1/chat/completions"
		got := fuzzAnswer(t, h, url)
		want := fuzzAnswer(t, other, url)
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("Transport's answer differs from net/http's (-nethttp +h1):\n%s", d)
		}
	})
}

// pipeUpstream is the client's end of an in-memory connection whose
// server reads one request, answers it with answer and closes.
func pipeUpstream(answer []byte) net.Conn {
	c, s := net.Pipe()
	go func() {
		defer s.Close()
		if req, err := http.ReadRequest(bufio.NewReader(s)); err == nil {
			_, _ = io.Copy(io.Discard, req.Body)
			_, _ = s.Write(answer)
		}
	}()
	return c
}

// skipAnswer reports whether net/http's Transport handles answer apart:
// a 101, or more than 5 interim answers.
func skipAnswer(answer []byte) bool {
	s := string(answer)
	return strings.Contains(s, " 101") || strings.Count(s, "HTTP/1.1 1") > 5 || strings.Count(s, "HTTP/1.0 1") > 5
}

// fuzzed is what one transport read of an answer.
type fuzzed struct {
	Failed  bool
	Status  int
	Body    string
	BodyErr bool
	Trailer string
}

func fuzzAnswer(t *testing.T, rt http.RoundTripper, url string) fuzzed {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("{}"))
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return fuzzed{Failed: true}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return fuzzed{Status: resp.StatusCode, Body: string(b), BodyErr: err != nil, Trailer: resp.Trailer.Get("Server-Timing")}
}

// TestCanonicalAddr: a URL's host:port as net.JoinHostPort makes it from
// its host name and port (80 when it names none).
func TestCanonicalAddr(t *testing.T) {
	for _, raw := range []string{
		"http://127.0.0.1:8000/v1", "http://127.0.0.1/v1", "http://example.com:81",
		"http://example.com", "http://[::1]:8000/x", "http://[::1]/x", "http://[fe80::1%25en0]:80/",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		port := u.Port()
		if port == "" {
			port = "80"
		}
		if diff := cmp.Diff(net.JoinHostPort(u.Hostname(), port), canonicalAddr(u)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", raw, diff)
		}
	}
}
