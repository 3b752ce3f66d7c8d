package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The Go floor: the least a Go streaming proxy costs on this machine — the
// standard library's HTTP server and transport, the request body read
// whole (as any routing proxy reads it), the answer copied read by read
// with a flush after each, over keep-alive connections, nothing measured
// or inspected, in a process of its own (this program re-executed). The gateway's
// distance to it is what tokentrace's own code costs; its distance to
// nginx is what Go's net/http and runtime cost.

const goProxyEnv = "TOKENTRACE_FLOOR_GOPROXY" // "LISTEN UPSTREAM" in the child

// goProxyMetrics is the Go floor's Go runtime counters (Prometheus text,
// as the gateway's /metrics carries them): its allocations per request
// beside the gateway's. Read twice a run, off the proxied path.
const goProxyMetrics = "/go-proxy-metrics"

// runGoProxy is the child process's main: it serves until interrupted.
func runGoProxy(spec string) int {
	var listen, upstream string
	if _, err := fmt.Sscan(spec, &listen, &upstream); err != nil {
		fmt.Fprintln(os.Stderr, "go proxy:", err)
		return 2
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 4096, IdleConnTimeout: 5 * time.Minute}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { proxyOne(w, r, tr, upstream) })
	mux.HandleFunc("/go-proxy-ready", func(http.ResponseWriter, *http.Request) {})
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	mux.Handle(goProxyMetrics, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Addr: listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 5 * time.Minute}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "go proxy:", err)
		return 1
	}
	return 0
}

// startGoProxy runs the Go floor in front of the upstream.
func startGoProxy(ctx context.Context, upstream string) (*proc, error) {
	return startSelf(ctx, "go proxy", goProxyEnv, upstream, "/go-proxy-ready")
}

// proxyOne passes one request to the upstream and its answer back.
func proxyOne(w http.ResponseWriter, r *http.Request, tr *http.Transport, upstream string) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+upstream+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	out.Header = r.Header.Clone()
	resp, err := tr.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
