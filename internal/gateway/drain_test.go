package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tokentrace/tokentrace/internal/openaitest"
)

func getHealth(t *testing.T, base string) (int, string) {
	t.Helper()
	resp, err := http.Get(base + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body.Status
}

func TestDrainTurnsHealthNotReadyAndKeepsServing(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a"})
	g := quickGateway(t, up.URL())
	gw := startGateway(t, g)
	if code, status := getHealth(t, gw.URL); code != 200 || status != "ok" {
		t.Fatalf("before Drain: /health %d %q", code, status)
	}
	g.Drain()
	if !g.Draining() {
		t.Fatal("Draining() false after Drain")
	}
	if code, status := getHealth(t, gw.URL); code != 503 || status != "draining" {
		t.Fatalf("after Drain: /health %d %q, want 503 draining", code, status)
	}
	if s, _, b := do(t, gw.URL, chatBody("m", true, "hi", ""), nil); s != 200 || !strings.Contains(b, "[DONE]") {
		t.Fatalf("a request while draining: %d %s", s, b)
	}
}

// startRun serves rc on a loopback port and returns its address and the
// channel its result arrives on.
func startRun(t *testing.T, ctx context.Context, rc RunConfig) (string, chan error) {
	t.Helper()
	addrc := make(chan net.Addr, 1)
	errc := make(chan error, 1)
	rc.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() { errc <- run(ctx, rc, func(a net.Addr) { addrc <- a }) }()
	select {
	case a := <-addrc:
		return a.String(), errc
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("gateway did not start")
	}
	return "", nil
}

// openStream starts a streaming request and reads it up to its first
// content event.
func openStream(t *testing.T, addr string) (*http.Response, *bufio.Reader) {
	t.Helper()
	resp := post(t, context.Background(), "http://"+addr, chatBody("m", true, "hi", ""), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	rd := bufio.NewReader(resp.Body)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended before its first token: %v", err)
		}
		if strings.Contains(line, `"content":"t0`) {
			return resp, rd
		}
	}
}

// refused waits until a new connection to addr is refused.
func refused(t *testing.T, addr string) {
	t.Helper()
	waitFor(t, "the listener to close", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return true
		}
		_ = c.Close()
		return false
	})
}

func waitRun(t *testing.T, errc chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

// A stop (the context that SIGTERM cancels) refuses new connections while
// a stream in flight runs to its end; then Run returns without error.
func TestRunFinishesInFlightStreamAfterStop(t *testing.T) {
	gate := make(chan struct{})
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a", Chunks: 3, Gate: gate})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, errc := startRun(t, ctx, RunConfig{Upstreams: []string{up.URL()}, Grace: time.Minute})
	go func() { gate <- struct{}{} }() // the first token
	resp, rd := openStream(t, addr)
	defer resp.Body.Close()

	cancel()
	refused(t, addr) // the stream is held by the gate: still in flight
	select {
	case err := <-errc:
		t.Fatalf("Run returned with a stream in flight: %v", err)
	default:
	}
	gate <- struct{}{}
	gate <- struct{}{}
	rest, err := io.ReadAll(rd)
	if err != nil {
		t.Fatalf("the stream in flight was cut: %v", err)
	}
	if !strings.Contains(string(rest), `"content":"t2`) || !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("the stream in flight did not finish: %q", rest)
	}
	if err := waitRun(t, errc); err != nil {
		t.Fatalf("Run after a clean drain: %v", err)
	}
}

// A stream still running when the grace expires is cut and Run says so.
func TestRunCutsStreamsAfterGrace(t *testing.T) {
	gate := make(chan struct{})
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a", Chunks: 3, Gate: gate})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, errc := startRun(t, ctx, RunConfig{Upstreams: []string{up.URL()}, Grace: 50 * time.Millisecond})
	go func() { gate <- struct{}{} }()
	resp, rd := openStream(t, addr)
	defer resp.Body.Close()

	cancel() // the gate is never opened again: the stream cannot finish
	err := waitRun(t, errc)
	if err == nil || !strings.Contains(err.Error(), "grace expired") {
		t.Fatalf("Run = %v, want the grace expiry named", err)
	}
	rest, _ := io.ReadAll(rd)
	if strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("a stream held past the grace finished: %q", rest)
	}
}

// With a drain delay, /health turns 503 while requests are still taken.
func TestRunDrainDelayServesWhileNotReady(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, errc := startRun(t, ctx, RunConfig{Upstreams: []string{up.URL()}, DrainDelay: time.Hour, Grace: time.Second})
	base := "http://" + addr
	if code, _ := getHealth(t, base); code != 200 {
		t.Fatalf("/health %d before the stop", code)
	}
	cancel()
	waitFor(t, "/health to turn 503", func() bool { code, _ := getHealth(t, base); return code == 503 })
	if s, _, b := do(t, base, chatBody("m", true, "hi", ""), nil); s != 200 || !strings.Contains(b, "[DONE]") {
		t.Fatalf("a request during the drain delay: %d %s", s, b)
	}
	select {
	case err := <-errc:
		t.Fatalf("Run returned during the drain delay: %v", err)
	default:
	}
}

func TestRunConfigRejectsNegativeDurations(t *testing.T) {
	for _, rc := range []RunConfig{{DrainDelay: -time.Second}, {Grace: -time.Second}} {
		rc.Upstreams = []string{"http://127.0.0.1:1"}
		if _, err := NewServer(rc); err == nil || !strings.Contains(err.Error(), "negative") {
			t.Errorf("NewServer(%+v) = %v, want a negative-duration error", rc, err)
		}
	}
}

// Every series a configuration can produce with known labels exists at
// zero before the first request, so rate() counts the first one.
func TestMetricsSeriesExistAtZero(t *testing.T) {
	g := mustGateway(t, `
pools: [{name: short, replicas: [{url: "http://127.0.0.1:1"}]}, {name: long, replicas: [{url: "http://127.0.0.1:2", models: [listed]}]}]
routes: [{model: llama, length_pools: [{max_input_tokens: 100, pool: short}, {pool: long}]}]
`)
	defer g.Close()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(g.Metrics.TTFT)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			lbl := map[string]string{}
			for _, lp := range m.GetLabel() {
				lbl[lp.GetName()] = lp.GetValue()
			}
			if m.GetHistogram().GetSampleCount() != 0 {
				t.Errorf("%v: count %d before any request", lbl, m.GetHistogram().GetSampleCount())
			}
			got = append(got, lbl["pool"]+"/"+lbl["model"])
		}
	}
	sort.Strings(got)
	if want := []string{"long/listed", "long/llama", "short/llama"}; !slices.Equal(got, want) {
		t.Errorf("TTFT series at zero: %v, want %v", got, want)
	}
	for _, pool := range []string{"short", "long"} {
		for _, reason := range rejectReasons {
			if v := testutil.ToFloat64(g.Metrics.Rejected.WithLabelValues(pool, reason)); v != 0 {
				t.Errorf("rejected{%s,%s} = %v", pool, reason, v)
			}
		}
	}
	if n := testutil.CollectAndCount(g.Metrics.Rejected); n != 2*len(rejectReasons) {
		t.Errorf("rejected series: %d, want %d", n, 2*len(rejectReasons))
	}
	if n := testutil.CollectAndCount(g.Metrics.Attempts); n != 2*len(attemptOutcomes) {
		t.Errorf("attempt series: %d, want %d", n, 2*len(attemptOutcomes))
	}
}
