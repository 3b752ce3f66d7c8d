package main

import (
	"bufio"
	"strings"
	"testing"
)

// TestReadRawHead reads a request's path and Content-Length, keeps the
// head verbatim, and refuses a bad length or an oversized head.
func TestReadRawHead(t *testing.T) {
	for _, tc := range []struct {
		name, in, path string
		n              int
		bad            bool
	}{
		{"request", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-length: 12\r\n\r\nbody", "/v1/chat/completions", 12, false},
		{"answer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n", "", 0, false},
		{"bare LF", "GET /raw-proxy-ready HTTP/1.1\nHost: x\n\n", rawProxyReady, 0, false},
		{"negative length", "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", "", 0, true},
		{"oversized", "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", rawHeadLimit) + "\r\n\r\n", "", 0, true},
		{"cut short", "GET / HTTP/1.1\r\nHost: x\r\n", "", 0, true},
	} {
		var dst []byte
		path, n, err := readRawHead(bufio.NewReaderSize(strings.NewReader(tc.in), 64<<10), &dst)
		if (err != nil) != tc.bad {
			t.Errorf("%s: err %v, want bad %v", tc.name, err, tc.bad)
			continue
		}
		if tc.bad {
			continue
		}
		if path != tc.path || n != tc.n || !strings.HasPrefix(tc.in, string(dst)) || !strings.HasSuffix(string(dst), "\n\n") && !strings.HasSuffix(string(dst), "\r\n\r\n") {
			t.Errorf("%s: path %q, length %d, head %q", tc.name, path, n, dst)
		}
	}
}

// FuzzReadRawHead: any bytes give a head that is a prefix of them, or an
// error; never a panic or a negative length.
func FuzzReadRawHead(f *testing.F) {
	f.Add("POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc")
	f.Add("GET  HTTP/1.1\r\n:\r\n\r\n")
	f.Fuzz(func(t *testing.T, in string) {
		var dst []byte
		_, n, err := readRawHead(bufio.NewReader(strings.NewReader(in)), &dst)
		if err == nil && (n < 0 || !strings.HasPrefix(in, string(dst))) {
			t.Fatalf("length %d, head %q of %q", n, dst, in)
		}
	})
}
