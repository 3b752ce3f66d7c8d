package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/openaitest"
)

// run serves rc on a loopback port until ctx ends; ready receives the
// address once it listens.
func run(ctx context.Context, rc RunConfig, ready func(net.Addr)) error {
	s, err := NewServer(rc)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	if ready != nil {
		ready(ln.Addr())
	}
	return s.Serve(ctx, ln)
}

func TestRunQuickStartServesAndShutsDown(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a"})
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan net.Addr, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, RunConfig{Upstreams: []string{up.URL()}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
			func(a net.Addr) { addrc <- a })
	}()
	var addr net.Addr
	select {
	case addr = <-addrc:
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(5 * time.Second):
		t.Fatal("gateway did not start")
	}
	s, _, b := do(t, "http://"+addr.String(), chatBody("any-model", true, "hi", ""), nil)
	if s != 200 || !strings.Contains(b, "[DONE]") {
		t.Fatalf("status %d body %s", s, b)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

func TestRunRefusesInvalidConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte("pools: [{name: p, replicas: []}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := NewServer(RunConfig{ConfigPath: path})
	if err == nil || !strings.Contains(err.Error(), "no replicas") {
		t.Fatalf("err = %v, want a refusal naming the problem", err)
	}
	for _, rc := range []RunConfig{{}, {ConfigPath: path, Upstreams: []string{"http://127.0.0.1:1"}}} {
		var fe *field.Error
		if _, err := NewServer(rc); !errors.As(err, &fe) {
			t.Fatalf("%+v: err %v, want a field error", rc, err)
		}
	}
}

func TestRunAppliesReadHeaderTimeout(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a"})
	path := filepath.Join(t.TempDir(), "gw.yaml")
	cfg := "server: {read_header_timeout: 100ms}\npools: [{name: p, replicas: [{url: \"" + up.URL() + "\"}]}]\nroutes: [{model: \"*\", pool: p}]\n"
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrc := make(chan net.Addr, 1)
	go func() {
		_ = run(ctx, RunConfig{ConfigPath: path, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, func(a net.Addr) { addrc <- a })
	}()
	addr := <-addrc
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"); err != nil { // headers never finished
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the gateway kept a connection with unfinished headers open for 5 s")
	}
}

func TestZeroGatewayAnswers503(t *testing.T) {
	gw := startGateway(t, &Gateway{})
	s, _, body := do(t, gw.URL, chatBody("m", false, "x", ""), nil)
	if s != 503 || !strings.Contains(body, "no_upstreams") {
		t.Fatalf("zero Gateway: %d %s", s, body)
	}
	r, err := http.Get(gw.URL + "/health")
	if err != nil || r.StatusCode != 200 {
		t.Fatalf("health: %v %v", r, err)
	}
	r.Body.Close()
	if r, _ := http.Get(gw.URL + "/metrics"); r.StatusCode != 404 {
		t.Errorf("metrics without a handler: %d, want 404", r.StatusCode)
	}
}

// gatewayGoroutines lists the goroutines running the gateway's background
// work or its HTTP server, by id, leaving out those in skip (running
// before the test started, left by other tests).
func gatewayGoroutines(skip map[string]bool) map[string]string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	out := map[string]string{}
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		id, _, _ := strings.Cut(g, " [")
		if skip[id] {
			continue
		}
		for _, fn := range []string{"gateway.(*Gateway).scrapeLoop", "gateway.Watch(", "gateway.(*Gateway).drainAndStop", "net/http.(*Server).Serve("} {
			if strings.Contains(g, fn) && !strings.Contains(g, "httptest") {
				out[id] = fn
			}
		}
	}
	return out
}

// When Serve returns, every goroutine it started has ended: the HTTP
// server, the reload watcher and each pool's scraper (those of a replaced
// configuration too).
func TestServeWaitsForItsGoroutines(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a"})
	path := filepath.Join(t.TempDir(), "gw.yaml")
	cfg := func(iv string) string {
		return "pools: [{name: p, scrape_interval: " + iv + ", replicas: [{url: \"" + up.URL() + "\"}]}, {name: q, balancer: queue_aware, replicas: [{url: \"" + up.URL() + "\"}]}]\nroutes: [{model: \"*\", pool: p}]\n"
	}
	if err := os.WriteFile(path, []byte(cfg("20ms")), 0o644); err != nil {
		t.Fatal(err)
	}
	before := map[string]bool{}
	for id := range gatewayGoroutines(nil) {
		before[id] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan net.Addr, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, RunConfig{ConfigPath: path, ReloadInterval: 10 * time.Millisecond, Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
			func(a net.Addr) { addrc <- a })
	}()
	addr := <-addrc
	if s, _, b := do(t, "http://"+addr.String(), chatBody("m", false, "hi", ""), nil); s != 200 {
		t.Fatalf("status %d: %s", s, b)
	}
	replaceFile(t, path, cfg("30ms")) // a reload: new scrapers, the old ones stopped
	deadline := time.Now().Add(10 * time.Second)
	for running := gatewayGoroutines(before); len(running) < 4; running = gatewayGoroutines(before) {
		if time.Now().After(deadline) {
			t.Fatalf("running: %v; want the server, the watcher and two scrapers", running)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if left := gatewayGoroutines(before); len(left) > 0 {
		t.Errorf("still running after Serve returned: %v", left)
	}
}
