package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"sync"

	"github.com/tokentrace/tokentrace/internal/process"
)

// The raw floor: the least a Go streaming proxy costs below net/http — a
// raw net.Conn HTTP/1.1 relay, one goroutine per client connection and
// nothing else: the request's head read by hand (its Content-Length
// found) and passed on verbatim with its body in one write, over the
// client connection's own keep-alive upstream connection, the answer's
// head passed back verbatim and its chunked body decoded and re-framed
// chunk by chunk, one write to the client per upstream read (as nginx
// with proxy_buffering off). No timeouts, limits beyond the head's size,
// stages or inspection: the floor of the server path of the gateway's
// own HTTP/1.1 code, beside the Go floor's (net/http's).

const rawProxyEnv = "TOKENTRACE_FLOOR_RAWPROXY" // "LISTEN UPSTREAM" in the child

// The raw floor's own paths: readiness, and its allocation count in the
// Prometheus text the harness reads (go_memstats_mallocs_total).
const (
	rawProxyReady   = "/raw-proxy-ready"
	rawProxyMetrics = "/raw-proxy-metrics"
)

// rawHeadLimit bounds a request's or an answer's head.
const rawHeadLimit = 16 << 10

var errRawHead = errors.New("raw proxy: malformed or oversized head")

// runRawProxy is the child process's main: it serves until interrupted.
func runRawProxy(spec string) int {
	var listen, upstream string
	if _, err := fmt.Sscan(spec, &listen, &upstream); err != nil {
		fmt.Fprintln(os.Stderr, "raw proxy:", err)
		return 2
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "raw proxy:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		_ = ln.Close()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			return 0
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			serveRaw(ctx, c, upstream)
		}()
	}
}

// startRawProxy runs the raw floor in front of the upstream.
func startRawProxy(ctx context.Context, upstream string) (*proc, error) {
	return startSelf(ctx, "raw proxy", rawProxyEnv, upstream, rawProxyReady)
}

// rawRelay is one client connection's state.
type rawRelay struct {
	c, up    net.Conn
	br, ubr  *bufio.Reader
	upstream string
	req, out []byte
}

// serveRaw relays the connection's requests one after another until
// either side fails or ctx ends.
func serveRaw(ctx context.Context, c net.Conn, upstream string) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	r := &rawRelay{c: c, br: bufio.NewReaderSize(c, 4096), upstream: upstream}
	defer func() {
		if r.up != nil {
			_ = r.up.Close()
		}
	}()
	for r.one() == nil {
	}
}

// one relays one request and its answer.
func (r *rawRelay) one() error {
	r.req = r.req[:0]
	path, n, err := readRawHead(r.br, &r.req)
	if err != nil {
		return err
	}
	switch path {
	case rawProxyReady:
		_, err = io.WriteString(r.c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
		return err
	case rawProxyMetrics:
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		body := fmt.Sprintf("# TYPE go_memstats_mallocs_total counter\ngo_memstats_mallocs_total %d\n", m.Mallocs)
		_, err = fmt.Fprintf(r.c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		return err
	}
	head := len(r.req)
	r.req = slices.Grow(r.req, n)[:head+n]
	if _, err := io.ReadFull(r.br, r.req[head:]); err != nil {
		return err
	}
	if err := r.send(); err != nil {
		return err
	}
	return r.answer()
}

// send writes the request to the upstream connection (dialled when there
// is none, again once when a kept one fails).
func (r *rawRelay) send() error {
	for try := 0; ; try++ {
		fresh := r.up == nil
		if fresh {
			up, err := net.Dial("tcp", r.upstream)
			if err != nil {
				return err
			}
			r.up, r.ubr = up, bufio.NewReaderSize(up, 4096)
		}
		_, err := r.up.Write(r.req)
		if err == nil {
			return nil
		}
		_ = r.up.Close()
		r.up = nil
		if fresh || try > 0 {
			return err
		}
	}
}

// answer passes the upstream's answer back: its head verbatim, then each
// chunk re-framed, written once nothing more is buffered.
func (r *rawRelay) answer() error {
	out := r.out[:0]
	defer func() { r.out = out[:0] }()
	if _, _, err := readRawHead(r.ubr, &out); err != nil {
		return err
	}
	for {
		line, err := r.ubr.ReadSlice('\n')
		if err != nil {
			return err
		}
		size, err := strconv.ParseUint(string(bytes.TrimRight(line, "\r\n")), 16, 32)
		if err != nil {
			return errRawHead
		}
		if size == 0 {
			if _, err := r.ubr.Discard(2); err != nil { // no trailers: the final CRLF
				return err
			}
			out = append(out, "0\r\n\r\n"...)
			_, err = r.c.Write(out)
			return err
		}
		out = strconv.AppendUint(out, size, 16)
		out = append(out, "\r\n"...)
		k := len(out)
		out = slices.Grow(out, int(size)+2)[:k+int(size)+2] // the data and its CRLF
		if _, err := io.ReadFull(r.ubr, out[k:]); err != nil {
			return err
		}
		if r.ubr.Buffered() == 0 {
			if _, err := r.c.Write(out); err != nil {
				return err
			}
			out = out[:0]
		}
	}
}

// readRawHead appends an HTTP/1.1 head (request or status line and
// header lines, up to the empty line) to *dst, and returns its request
// path and Content-Length (0 when none).
func readRawHead(br *bufio.Reader, dst *[]byte) (path string, contentLength int, err error) {
	start := len(*dst)
	for first := true; ; first = false {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return "", 0, err
		}
		*dst = append(*dst, line...)
		if len(*dst)-start > rawHeadLimit {
			return "", 0, errRawHead
		}
		if first {
			if f := bytes.Fields(line); len(f) == 3 && f[1][0] == '/' {
				path = string(f[1])
			}
			continue
		}
		if len(line) <= 2 {
			return path, contentLength, nil
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if ok && bytes.EqualFold(name, []byte("Content-Length")) {
			if contentLength, err = strconv.Atoi(string(bytes.TrimSpace(value))); err != nil || contentLength < 0 || contentLength > 1<<20 {
				return "", 0, errRawHead
			}
		}
	}
}

// startSelf runs this program again as the child named by env (a Go floor
// proxy) in front of upstream, and waits for its ready path.
func startSelf(ctx context.Context, name, env, upstream, ready string) (*proc, error) {
	addr, err := process.FreeAddr()
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+addr+" "+upstream)
	return startProc(ctx, name, addr, cmd, "http://"+addr+ready)
}
