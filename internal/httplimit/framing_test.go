package httplimit

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestBothLengthsCloseTheConnection: a request with both Content-Length
// and Transfer-Encoding is answered, then its connection closed (RFC 9112
// §6.3); one with either alone keeps its connection.
func TestBothLengthsCloseTheConnection(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	})
	url, _ := served(t, ctx, h, Stop{})
	addr := strings.TrimPrefix(url, "http://")
	const chunked = "4\r\nabcd\r\n0\r\n\r\n"
	for _, c := range []struct {
		name, head string
		closed     bool
	}{
		{"both", "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n", true},
		{"both, lower case and reversed", "transfer-encoding: chunked\r\ncontent-length: 4\r\n", true},
		{"chunked only", "Transfer-Encoding: chunked\r\n", false},
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(conn, "POST / HTTP/1.1\r\nHost: h\r\n"+c.head+"\r\n"+chunked); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		// A second request on the connection: answered only if it was kept.
		_, _ = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
		_, err = http.ReadResponse(br, nil)
		if closed := err != nil; closed != c.closed || resp.Close != c.closed {
			t.Errorf("%s: connection closed %v (Connection: close %v), want %v", c.name, closed, resp.Close, c.closed)
		}
		conn.Close()
	}
}
