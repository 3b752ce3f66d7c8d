package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/openaitest"
)

// TestRawSendSlowClient: over TCP with small socket buffers, served as in
// production (httplimit's server: the send queue writes below net/http),
// a client that reads nothing does not hold its pool slot once the
// upstream's answer has ended — the writes the connection did not take
// went to the sending goroutine, started then —, and reading afterwards
// it gets the whole answer in order, chunked framing intact, [DONE] and
// the Server-Timing trailer included. Also through net/http's writer
// only (noRawSend), the same.
func TestRawSendSlowClient(t *testing.T) {
	for _, raw := range []bool{true, false} {
		t.Run(fmt.Sprintf("raw=%v", raw), func(t *testing.T) {
			up := openaitest.Start(t, &openaitest.Upstream{Chunks: 2000})
			g := mustGateway(t, "server: {send_timeout: 1m}\npools: [{name: p, queue: {concurrency: 1, max_size: 4}, replicas: [{url: "+up.URL()+"}]}]\nroutes: [{model: \"*\", pool: p}]\n")
			srv := newLimitsServer(g)
			srv.Listener = smallSendBuffers{srv.Listener}
			g.noRawSend = !raw
			srv.Start()
			t.Cleanup(func() { srv.Close(); g.Close() })
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.(*net.TCPConn).SetReadBuffer(16 << 10)
			body := chatBody("m", true, "x", "")
			fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\nTE: trailers\r\n\r\n%s", len(body), body)
			waitFor(t, "the upstream to serve the request", func() bool { return up.Served.Load() == 1 })
			waitFor(t, "the slot to be given back while the client has read nothing", func() bool { _, in, _ := poolState(g, "p"); return in == 0 })
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body) // net/http's chunked reader: a framing error fails it
			if err != nil && !errors.Is(err, io.EOF) {
				t.Fatalf("reading the answer: %v", err)
			}
			if n := bytes.Count(got, []byte(`"content":"t`)); n != 2000 || !bytes.HasSuffix(got, []byte("data: [DONE]\n\n")) {
				t.Fatalf("the client read %d content chunks of 2000 (%d bytes), ends %q", n, len(got), got[max(0, len(got)-40):])
			}
			if resp.Trailer.Get("Server-Timing") == "" {
				t.Errorf("no Server-Timing trailer: %v", resp.Trailer)
			}
			// In order: the content chunks' tokens count up.
			if i, j := bytes.Index(got, []byte(`"content":"t0 "`)), bytes.Index(got, []byte(`"content":"t1999 "`)); i < 0 || j < i {
				t.Errorf("first and last token at %d and %d", i, j)
			}
		})
	}
}
