package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/httplimit/httplimittest"
	"github.com/tokentrace/tokentrace/internal/openaitest"
)

// runGateway serves a gateway on a loopback port with the YAML configuration
// given, until the test ends, and returns its address.
func runGateway(t *testing.T, yamlText string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(path, []byte(yamlText), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan net.Addr, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, RunConfig{ConfigPath: path, Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
			func(a net.Addr) { addrc <- a })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("gateway: %v", err)
		}
	})
	select {
	case a := <-addrc:
		return a.String()
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("the gateway did not start")
	}
	return ""
}

// TestSlowBodiesAreTimedOut: 500 clients that send headers and 28 of the
// 1000 body bytes they announce, then nothing, do not keep an ordinary
// request from being served; each is answered 408 and disconnected once
// server.body_timeout has passed, and the descriptors are given back.
func TestSlowBodiesAreTimedOut(t *testing.T) {
	if testing.Short() {
		t.Skip("holds 500 connections for the body timeout")
	}
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a"})
	const bodyTimeout = 5 * time.Second
	addr := runGateway(t, fmt.Sprintf("server: {body_timeout: %v}\npools: [{name: p, replicas: [{url: %q}]}]\nroutes: [{model: \"*\", pool: p}]\n",
		bodyTimeout, up.URL()))
	httplimittest.SlowBodies{Addr: addr, Path: "/v1/chat/completions", Clients: 500, Normal: httplimittest.PostOK("http://"+addr+"/v1/chat/completions", chatBody("m", false, "hi", "")), Wait: bodyTimeout + 30*time.Second}.Run(t)
}

func TestServerLimitsConfig(t *testing.T) {
	const pools = "pools: [{name: p, replicas: [{url: \"http://h:1\"}]}]\n"
	c, err := ParseConfig([]byte(pools))
	if err != nil {
		t.Fatal(err)
	}
	want := httplimit.Limits{ReadHeaderTimeout: 10 * time.Second, BodyTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute,
		MaxConns: httplimit.DefaultMaxConns(2)}
	if got := c.Server.limits(); got != want {
		t.Errorf("default limits %+v, want %+v", got, want)
	}
	c, err = ParseConfig([]byte(pools + "server: {read_header_timeout: 2s, body_timeout: 7s, idle_timeout: 1m, max_connections: 300}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want = httplimit.Limits{ReadHeaderTimeout: 2 * time.Second, BodyTimeout: 7 * time.Second, IdleTimeout: time.Minute, MaxConns: 300}
	if got := c.Server.limits(); got != want {
		t.Errorf("limits %+v, want %+v", got, want)
	}
	if _, err := ParseConfig([]byte(pools + "server: {max_connections: -1}\n")); err == nil || !strings.Contains(err.Error(), "server.max_connections") {
		t.Errorf("negative max_connections: %v", err)
	}
	if _, err := ParseConfig([]byte(pools + "server: {body_timeout: -1s}\n")); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("negative body_timeout: %v", err)
	}
}

// TestLocalLimiter checks the token buckets by hand: 2 requests/s with a
// burst of 3, and 120 tokens/min (2 per second, capacity 120).
func TestLocalLimiter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := NewLocalLimiter(KeyConfig{RequestsPerSecond: 2, Burst: 3, TokensPerMinute: 120})
	steps := []struct {
		at      time.Duration
		tokens  int
		allowed bool
		wait    time.Duration
		req     Quota
		tok     Quota
	}{
		{0, 100, true, 0, Quota{3, 2, 500 * time.Millisecond}, Quota{120, 20, 50 * time.Second}},
		// 50 tokens with 20 left: (50 − 20) / 2 per s = 15 s; nothing charged.
		{0, 50, false, 15 * time.Second, Quota{3, 2, 500 * time.Millisecond}, Quota{120, 20, 15 * time.Second}},
		{0, 10, true, 0, Quota{3, 1, time.Second}, Quota{120, 10, 55 * time.Second}},
		{0, 0, true, 0, Quota{3, 0, 1500 * time.Millisecond}, Quota{120, 10, 55 * time.Second}},
		// The requests bucket is empty: one more in 1 / 2 s.
		{0, 0, false, 500 * time.Millisecond, Quota{3, 0, 500 * time.Millisecond}, Quota{120, 10, 55 * time.Second}},
		{500 * time.Millisecond, 0, true, 0, Quota{3, 0, 1500 * time.Millisecond}, Quota{120, 11, 54500 * time.Millisecond}},
		// More tokens than the capacity wait for a full bucket: (120 − 11) / 2 s.
		{500 * time.Millisecond, 500, false, 54500 * time.Millisecond, Quota{3, 0, 500 * time.Millisecond}, Quota{120, 11, 54500 * time.Millisecond}},
		{55 * time.Second, 500, true, 0, Quota{3, 2, 500 * time.Millisecond}, Quota{120, 0, time.Minute}},
	}
	for i, st := range steps {
		d := l.Allow(context.Background(), t0.Add(st.at), st.tokens)
		want := LimitDecision{Allowed: st.allowed, Wait: st.wait, Requests: st.req, Tokens: st.tok}
		if diff := cmp.Diff(want, d); diff != "" {
			t.Errorf("step %d (-want +got):\n%s", i, diff)
		}
	}
	h := http.Header{}
	setLimitHeaders(h, LimitDecision{Requests: Quota{3, 1, 1234567 * time.Microsecond}})
	wantH := http.Header{"X-Ratelimit-Limit-Requests": {"3"}, "X-Ratelimit-Remaining-Requests": {"1"}, "X-Ratelimit-Reset-Requests": {"1.235s"}}
	if diff := cmp.Diff(wantH, h); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
	// The default burst is the rate, at least 1, rounded down.
	for rps, burst := range map[float64]int64{0.5: 1, 2.5: 2, 10: 10} {
		if got := NewLocalLimiter(KeyConfig{RequestsPerSecond: rps}).Allow(context.Background(), t0, 0).Requests.Limit; got != burst {
			t.Errorf("rate %v: burst %d, want %d", rps, got, burst)
		}
	}
}

// sharedLimiter stands for a limiter shared by gateway replicas: it
// refuses every request past the first.
type sharedLimiter struct {
	mu     sync.Mutex
	calls  int
	tokens []int
}

func (s *sharedLimiter) Allow(_ context.Context, _ time.Time, tokens int) LimitDecision {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	s.tokens = append(s.tokens, tokens)
	q := Quota{Limit: 1, Reset: 3 * time.Second}
	if s.calls == 1 {
		return LimitDecision{Allowed: true, Requests: q}
	}
	return LimitDecision{Wait: 3 * time.Second, Requests: q}
}

// A second Limiter implementation slots in through Gateway.NewLimiter:
// the gateway asks it with the request's tokens, answers its refusal
// with 429 and its wait, and reports its quota.
func TestLimiterSlotsIn(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a"})
	cfg, err := ParseConfig([]byte(fmt.Sprintf("pools: [{name: p, replicas: [{url: %q}]}]\nroutes: [{model: \"*\", pool: p}]\nkeys: [{name: k, sha256: %s, requests_per_second: 1}, {name: free, sha256: %s}]\n",
		up.URL(), HashKey("k-1"), HashKey("k-free"))))
	if err != nil {
		t.Fatal(err)
	}
	shared := &sharedLimiter{}
	var made []KeyConfig
	g := &Gateway{NewLimiter: func(k KeyConfig) Limiter { made = append(made, k); return shared }}
	if err := g.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	gw := startGateway(t, g)
	auth := map[string]string{"Authorization": "Bearer k-1"}
	body := chatBody("m", false, "hi", `,"max_tokens":60`)
	if s, h, b := do(t, gw.URL, body, auth); s != 200 || h.Get("X-Ratelimit-Limit-Requests") != "1" {
		t.Fatalf("first: %d %v %s", s, h, b)
	}
	s, h, b := do(t, gw.URL, body, auth)
	if s != 429 || h.Get("Retry-After") != "3" || !strings.Contains(b, "rate_limit") {
		t.Fatalf("second: %d %v %s", s, h, b)
	}
	if s, _, b := do(t, gw.URL, body, map[string]string{"Authorization": "Bearer k-free"}); s != 200 {
		t.Fatalf("a key without limits: %d %s", s, b)
	}
	if len(made) != 1 || made[0].Name != "k" || len(shared.tokens) != 2 || shared.tokens[0] != 1+1+60 {
		t.Errorf("limiters made for %v, asked with tokens %v (want one, for k; 62 tokens: a role, hi, max_tokens 60)", made, shared.tokens)
	}
}
