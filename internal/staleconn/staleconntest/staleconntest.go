// Package staleconntest is a raw HTTP/1.1 server for tests that drops
// connections as real servers do: closing after each streamed answer
// though its headers say keep-alive (as llama.cpp's llama-server does),
// closing or resetting a connection's second request unanswered, or
// cutting an answer short. Each answer is a small chat completion stream
// ending in [DONE].
//
// It imports nothing of this module (standard library only).
package staleconntest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
)

// Mode is what the server does with the requests on one connection.
type Mode int

const (
	// CloseAfterAnswer answers each request with keep-alive headers and
	// closes the connection at once.
	CloseAfterAnswer Mode = iota
	// DiscardSecond answers a connection's first request; the second it
	// reads and closes the connection (FIN) without a byte of answer.
	DiscardSecond
	// ResetSecond answers the first; the second it reads and resets (RST).
	ResetSecond
	// ResetAll reads every request and resets the connection (RST).
	ResetAll
	// CutSecond answers the first; the second gets its headers and half
	// its events, then the connection is closed.
	CutSecond
)

// Stream is the answer's body: one content event and [DONE].
const Stream = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n"

// Start serves on a loopback port until the test ends and returns the
// server's base URL (http://127.0.0.1:PORT).
func Start(t testing.TB, m Mode) string {
	t.Helper()
	return Serve(t, func(c *net.TCPConn) { serveConn(c, m) })
}

// Serve is the raw server under Start, for a test that writes its own
// bytes: it accepts connections on a loopback port until the test ends,
// each handled by handle on its own goroutine (handle closes it; the
// test's cleanup closes the listener and waits for every handle to
// return), and returns the server's base URL (http://127.0.0.1:PORT).
func Serve(t testing.TB, handle func(*net.TCPConn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); handle(c.(*net.TCPConn)) }()
		}
	}()
	return "http://" + ln.Addr().String()
}

func serveConn(c *net.TCPConn, m Mode) {
	defer func() { _ = c.Close() }()
	br := bufio.NewReader(c)
	for n := 1; ; n++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return
		}
		head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n"
		switch {
		case n == 2 && m == DiscardSecond:
			return
		case n == 2 && m == ResetSecond, m == ResetAll:
			_ = c.SetLinger(0)
			return
		case n == 2 && m == CutSecond:
			_, _ = fmt.Fprintf(c, "%s%x\r\n%s\r\n", head, len(Stream)/2, Stream[:len(Stream)/2])
			return
		}
		if _, err := fmt.Fprintf(c, "%s%x\r\n%s\r\n0\r\n\r\n", head, len(Stream), Stream); err != nil {
			return
		}
		if m == CloseAfterAnswer || req.Close {
			return
		}
	}
}
