package browsertest

import (
	"io"
	"net"
	"testing"
)

// OpenStalledStream opens addr's path as a browser's event stream would
// (GET, Accept: text/event-stream) over a connection whose receive buffer
// is fixed at 64 KiB (no autotuning), so that a stream nobody reads fills
// the server's buffers soon. The connection is closed with the test; the
// response, head first, is the caller's to read.
func OpenStalledStream(t *testing.T, addr, path string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.(*net.TCPConn).SetReadBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return c
}
