package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/openaitest"
)

// TestTotalExpiringWhileQueuedIs504: a route's total timeout that expires
// while the request waits in its pool's queue answers 504 timeout to a
// client still connected (not 499), counted as a 5xx (availability).
func TestTotalExpiringWhileQueuedIs504(t *testing.T) {
	gate := make(chan struct{})
	up := openaitest.Start(t, &openaitest.Upstream{Gate: gate, Chunks: 1})
	g := mustGateway(t, "pools: [{name: p, queue: {concurrency: 1, max_size: 4}, replicas: [{url: "+up.URL()+"}]}]\nroutes: [{model: long, pool: p}, {model: \"*\", pool: p, timeouts: {total: 300ms}}]\n")
	srv := startGateway(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first := make(chan int, 1)
	go func() {
		resp := post(t, ctx, srv.URL, chatBody("long", true, "x", ""), nil)
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	waitFor(t, "the first request to hold the slot", func() bool { return up.Active.Load() == 1 })
	code, _, body := do(t, srv.URL, chatBody("m", false, "x", ""), nil)
	close(gate)
	<-first
	if code != http.StatusGatewayTimeout || !strings.Contains(body, `"code":"timeout"`) {
		t.Fatalf("queued past total: %d %s, want 504 timeout", code, body)
	}
	if n := testutil.ToFloat64(g.Metrics.Requests.WithLabelValues("p", "*", "504")); n < 1 {
		t.Errorf("requests_total{status=504} = %v, want the queued request counted", n)
	}
}

// TestReloadThatLosesKeysIsRefused: a configuration without a keys
// section in place of one with keys (a file that lost it) is refused and
// authentication stays on; `keys: []` turns it off, with a warning.
func TestReloadThatLosesKeysIsRefused(t *testing.T) {
	const base = "pools: [{name: p, replicas: [{url: \"http://h:1\"}]}]\nroutes: [{model: \"*\", pool: p}]\n"
	var logs lockedBuffer
	g := mustGateway(t, base+"keys: [{name: k, sha256: "+strings.Repeat("ab", 32)+"}]\n")
	g.Log = slog.New(slog.NewTextHandler(&logs, nil))
	for _, c := range []struct {
		yaml     string
		keysLeft int
	}{
		{base, 1},                // the section is gone: refused
		{base + "keys:\n", 1},    // null: as gone
		{base + "keys: []\n", 0}, // explicit: authentication off
	} {
		cfg, err := ParseConfig([]byte(c.yaml))
		if err != nil {
			t.Fatal(err)
		}
		err = g.SetConfig(cfg)
		if n := len(g.rt.Load().keys); n != c.keysLeft {
			t.Fatalf("%q: %d keys after the reload (err %v), want %d", c.yaml, n, err, c.keysLeft)
		}
		if c.keysLeft == 1 && (err == nil || !strings.Contains(err.Error(), "keys: []")) {
			t.Errorf("%q: %v, want a refusal naming keys: []", c.yaml, err)
		}
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "authentication turned off") {
		t.Errorf("turning authentication off was not a warning: %s", logs.String())
	}
}

// TestUpstreamRedirectIs502: an upstream's 3xx, with a Location or
// without, is neither followed nor passed on: 502 upstream_redirect.
func TestUpstreamRedirectIs502(t *testing.T) {
	for _, loc := range []string{"", "http://127.0.0.1:1/elsewhere"} {
		up := openaitest.Start(t, &openaitest.Upstream{Status: http.StatusTemporaryRedirect, Header: http.Header{"Location": {loc}}})
		g := mustGateway(t, "pools: [{name: p, replicas: [{url: "+up.URL()+"}]}]\nroutes: [{model: \"*\", pool: p}]\n")
		srv := startGateway(t, g)
		code, h, body := do(t, srv.URL, chatBody("m", false, "x", ""), nil)
		if code != http.StatusBadGateway || !strings.Contains(body, `"code":"upstream_redirect"`) || h.Get("Location") != "" {
			t.Errorf("Location %q: %d %s (Location %q), want 502 upstream_redirect", loc, code, body, h.Get("Location"))
		}
	}
}

// TestTokenLimitWarnsWithoutADefault: a key with tokens_per_minute and a
// route with no length default or limit (its requests without max_tokens
// would be charged their input only) is warned of at load, unless its pool
// sets context_tokens (charged the context left).
func TestTokenLimitWarnsWithoutADefault(t *testing.T) {
	cfg, err := ParseConfig([]byte("pools: [{name: p, replicas: [{url: \"http://h:1\"}]}, {name: c, context_tokens: 8192, replicas: [{url: \"http://h:2\"}]}]\nroutes: [{model: open, pool: p}, {model: capped, pool: p, length: {max_max_tokens: 100}}, {model: known, pool: c}]\nkeys: [{name: k, sha256: " + strings.Repeat("ab", 32) + ", tokens_per_minute: 1000}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	g := &Gateway{Log: slog.New(slog.NewTextHandler(&logs, nil))}
	if err := g.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if s := logs.String(); !strings.Contains(s, "level=WARN") || !strings.Contains(s, "route=open") || strings.Contains(s, "route=capped") || strings.Contains(s, "route=known") {
		t.Errorf("want one warning naming route open: %s", s)
	}
}

// TestSmallerHostileInputs: the authentication scheme is case-insensitive;
// a client's X-Request-Id with bytes outside printable ASCII is replaced
// by the gateway's own; tokentrace serve's fault header never reaches an
// upstream; a body declared over max_body_bytes is refused with 413
// before any of it is asked for (no 100 Continue), on every API's path.
func TestSmallerHostileInputs(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{})
	g := mustGateway(t, "server: {max_body_bytes: 1000}\npools: [{name: p, replicas: [{url: "+up.URL()+"}]}]\nroutes: [{model: \"*\", pool: p}]\nkeys: [{name: k, sha256: "+HashKey("sk-1")+"}]\n")
	srv := startGateway(t, g)
	code, h, body := do(t, srv.URL, chatBody("m", false, "x", ""), map[string]string{
		"Authorization": "bearer sk-1", "X-Request-Id": "id-with-\u00e9-bytes", "X-TokenTrace-Fault": "reset"})
	if code != http.StatusOK {
		t.Fatalf("Authorization: bearer (lower case): %d %s, want 200", code, body)
	}
	if id := h.Get("X-Request-Id"); !strings.HasPrefix(id, "gw-") {
		t.Errorf("X-Request-Id %q: a client's id with control or non-ASCII bytes was kept", id)
	}
	if hs := up.Headers(); len(hs) != 1 || hs[0].Get("X-TokenTrace-Fault") != "" {
		t.Errorf("the fault header reached the upstream: %v", hs)
	}
	for _, api := range openai.APIs {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer sk-1\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: 10485760\r\n\r\n", api.Path())
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		status, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || !strings.HasPrefix(status, "HTTP/1.1 413") {
			t.Errorf("%s: a body declared over the limit: %q %v, want 413 at once", api, status, err)
		}
	}
}

// TestModelsAndAdminEndpoints: /v1/models counts against its key's
// request limit like any other request (no fan-out past it); /health and
// /metrics answer GET and HEAD only.
func TestModelsAndAdminEndpoints(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{})
	g := mustGateway(t, "pools: [{name: p, replicas: [{url: "+up.URL()+"}]}]\nroutes: [{model: \"*\", pool: p}]\nkeys: [{name: k, sha256: "+HashKey("sk-1")+", requests_per_second: 0.001, burst: 1}]\n")
	srv := startGateway(t, g)
	get := func(method, path string) int {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer sk-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if a, b := get(http.MethodGet, "/v1/models"), get(http.MethodGet, "/v1/models"); a != 200 || b != 429 {
		t.Errorf("/v1/models twice on a key of burst 1: %d then %d, want 200 then 429", a, b)
	}
	for _, path := range []string{"/health", "/metrics"} {
		if c := get(http.MethodPost, path); c != http.StatusMethodNotAllowed {
			t.Errorf("POST %s: %d, want 405", path, c)
		}
		if c := get(http.MethodHead, path); c != http.StatusOK && c != http.StatusNotFound {
			t.Errorf("HEAD %s: %d", path, c)
		}
	}
}

// TestForwardedForAppendsTheClient: the client's X-Forwarded-For and
// Forwarded reach the upstream with the client's address appended (as
// httputil.ReverseProxy does), never passed on as the client wrote them.
func TestForwardedForAppendsTheClient(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{})
	g := mustGateway(t, "pools: [{name: p, replicas: [{url: "+up.URL()+"}]}]\nroutes: [{model: \"*\", pool: p}]\n")
	srv := startGateway(t, g)
	for _, hdr := range []map[string]string{
		{},
		{"X-Forwarded-For": "10.9.9.9", "Forwarded": "for=10.9.9.9"},
	} {
		if code, _, body := do(t, srv.URL, chatBody("m", false, "x", ""), hdr); code != http.StatusOK {
			t.Fatalf("%v: %d %s", hdr, code, body)
		}
	}
	hs := up.Headers()
	if len(hs) != 2 {
		t.Fatalf("%d upstream requests, want 2", len(hs))
	}
	for i, want := range []struct{ xff, fwd string }{
		{"127.0.0.1", ""},
		{"10.9.9.9, 127.0.0.1", "for=10.9.9.9, for=127.0.0.1"},
	} {
		if got := strings.Join(hs[i].Values("X-Forwarded-For"), ", "); got != want.xff {
			t.Errorf("request %d: X-Forwarded-For %q, want %q", i, got, want.xff)
		}
		if got := strings.Join(hs[i].Values("Forwarded"), ", "); got != want.fwd {
			t.Errorf("request %d: Forwarded %q, want %q", i, got, want.fwd)
		}
	}
}

// TestModelsListIsCached: /v1/models asks each replica at most once per
// second (modelsTTL), whatever the number of calls; a reload asks again.
func TestModelsListIsCached(t *testing.T) {
	var asked atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m1","object":"model"}]}`)
	}))
	defer up.Close()
	var now atomic.Int64 // Unix nanoseconds
	now.Store(time.Unix(1000, 0).UnixNano())
	cfg := "pools: [{name: p, replicas: [{url: " + up.URL + "}]}]\nroutes: [{model: \"*\", pool: p}]\n"
	g := mustGateway(t, cfg)
	g.Now = func() time.Time { return time.Unix(0, now.Load()) }
	srv := startGateway(t, g)
	list := func() string {
		resp, err := http.Get(srv.URL + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	for range 20 {
		if b := list(); !strings.Contains(b, `"m1"`) {
			t.Fatalf("/v1/models: %s", b)
		}
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("20 calls within the TTL asked the replica %d times, want 1", n)
	}
	now.Add(int64(modelsTTL + time.Millisecond))
	list()
	if n := asked.Load(); n != 2 {
		t.Errorf("a call past the TTL: the replica asked %d times in all, want 2", n)
	}
	c, _ := ParseConfig([]byte(cfg))
	if err := g.SetConfig(c); err != nil {
		t.Fatal(err)
	}
	list()
	if n := asked.Load(); n != 3 {
		t.Errorf("a call after a reload: the replica asked %d times in all, want 3", n)
	}
}

// TestTokenLimitCountsNAndSettles: tokens_per_minute charges input + n ×
// max_tokens at admission, and settles with the answer's usage after it:
// what was not used is given back, and a request without max_tokens (on
// a route with no default) is charged what it used. The clock stands
// still: the bucket does not refill between the steps.
func TestTokenLimitCountsNAndSettles(t *testing.T) {
	req, err := ScanRequest([]byte(chatBody("m", false, "hi", "")), openai.APIChat, 512)
	if err != nil {
		t.Fatal(err)
	}
	in := req.InputTokens()
	// Every answer: 3 completion tokens, and the estimate as prompt_tokens.
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a", PromptTokens: in})
	g := mustGateway(t, fmt.Sprintf("pools: [{name: p, replicas: [{url: %q}]}]\nroutes: [{model: \"*\", pool: p}]\nkeys: [{name: k, sha256: %s, tokens_per_minute: 1000}]\n", up.URL(), HashKey("k-tok")))
	now := time.Unix(1000, 0)
	g.Now = func() time.Time { return now }
	gw := startGateway(t, g)
	auth := map[string]string{"Authorization": "Bearer k-tok"}
	remaining := func(extra string) int {
		t.Helper()
		body := chatBody("m", false, "hi", extra)
		s, hdr, b := do(t, gw.URL, body, auth)
		if s != http.StatusOK {
			t.Fatalf("%s: status %d: %s", extra, s, b)
		}
		n, err := strconv.Atoi(hdr.Get("X-Ratelimit-Remaining-Tokens"))
		if err != nil {
			t.Fatalf("%s: X-Ratelimit-Remaining-Tokens %q", extra, hdr.Get("X-Ratelimit-Remaining-Tokens"))
		}
		return n
	}
	const used = 3
	r1 := remaining(`,"n":2,"max_tokens":30`) // charged in + 2 × 30
	if want := 1000 - in - 60; r1 != want {
		t.Fatalf("after n=2, max_tokens=30: %d tokens left, want %d (n × max_tokens charged)", r1, want)
	}
	r2 := remaining(`,"max_tokens":10`) // the first gave back 60 − 3
	if want := r1 + (60 - used) - in - 10; r2 != want {
		t.Fatalf("after max_tokens=10: %d left, want %d (the unused output given back)", r2, want)
	}
	r3 := remaining(``) // no max_tokens, no route default: input only at admission
	if want := r2 + (10 - used) - in; r3 != want {
		t.Fatalf("without max_tokens: %d left, want %d", r3, want)
	}
	r4 := remaining(`,"max_tokens":1`) // the third was charged the 3 it used
	if want := r3 - used - in - 1; r4 != want {
		t.Errorf("after an answer without max_tokens: %d left, want %d (its output charged afterwards)", r4, want)
	}
}

// TestTokenLimitChargesContextLeft: a request without max_tokens on a
// route with no default is charged, per answer, the context left after
// its input when its pool sets context_tokens — not its input only; a
// route default still comes first. The clock stands still; the upstream
// answers 3 tokens (one choice) and reports the estimate as
// prompt_tokens.
func TestTokenLimitChargesContextLeft(t *testing.T) {
	req, err := ScanRequest([]byte(chatBody("m", false, "hi", "")), openai.APIChat, 512)
	if err != nil {
		t.Fatal(err)
	}
	in := req.InputTokens()
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a", PromptTokens: in})
	g := mustGateway(t, fmt.Sprintf(`pools: [{name: p, context_tokens: 4096, replicas: [{url: %q}]}]
routes: [{model: "d", pool: p, length: {default_max_tokens: 100}}, {model: "*", pool: p}]
keys: [{name: k, sha256: %s, tokens_per_minute: 100000}]
`, up.URL(), HashKey("k-tok")))
	now := time.Unix(1000, 0)
	g.Now = func() time.Time { return now }
	gw := startGateway(t, g)
	auth := map[string]string{"Authorization": "Bearer k-tok"}
	left := 100000
	for i, c := range []struct {
		model, extra string
		charged      int // at admission
	}{
		{"m", ``, in + 4096 - in},         // the context left
		{"m", `,"n":2`, in + 2*(4096-in)}, // per answer
		{"m", `,"max_tokens":7`, in + 7},  // the client's own
		{"d", ``, in + 100},               // the route's default first
	} {
		s, hdr, b := do(t, gw.URL, chatBody(c.model, false, "hi", c.extra), auth)
		if s != http.StatusOK {
			t.Fatalf("step %d: status %d: %s", i, s, b)
		}
		got, err := strconv.Atoi(hdr.Get("X-Ratelimit-Remaining-Tokens"))
		if want := left - c.charged; err != nil || got != want {
			t.Fatalf("step %d (%s %s): %d tokens left (%v), want %d (%d charged)", i, c.model, c.extra, got, err, want, c.charged)
		}
		left = got + c.charged - (in + 3) // settled: the upstream answered 3 tokens (one choice)
	}
}

// TestTokenSettlementCountsPromptTokens: the settlement takes the
// engine's count of the input (usage.prompt_tokens) in place of the
// gateway's estimate charged at admission, whole answers and streams
// alike (the stream's final usage chunk). The engine counts 500 (a chat
// template the estimate does not see); the clock stands still.
func TestTokenSettlementCountsPromptTokens(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			up := openaitest.Start(t, &openaitest.Upstream{Name: "a", PromptTokens: 500, UsageChunk: true}) // 3 completion tokens
			g := mustGateway(t, fmt.Sprintf("pools: [{name: p, replicas: [{url: %q}]}]\nroutes: [{model: \"*\", pool: p}]\nkeys: [{name: k, sha256: %s, tokens_per_minute: 10000}]\n", up.URL(), HashKey("k-tok")))
			now := time.Unix(1000, 0)
			g.Now = func() time.Time { return now }
			gw := startGateway(t, g)
			auth := map[string]string{"Authorization": "Bearer k-tok"}
			body := chatBody("m", stream, "hi", `,"max_tokens":10,"stream_options":{"include_usage":true}`)
			if !stream {
				body = chatBody("m", false, "hi", `,"max_tokens":10`)
			}
			req, err := ScanRequest([]byte(body), openai.APIChat, 512)
			if err != nil {
				t.Fatal(err)
			}
			in := req.InputTokens()
			left := func() int {
				t.Helper()
				s, hdr, b := do(t, gw.URL, body, auth)
				if s != http.StatusOK {
					t.Fatalf("status %d: %s", s, b)
				}
				n, err := strconv.Atoi(hdr.Get("X-Ratelimit-Remaining-Tokens"))
				if err != nil {
					t.Fatalf("X-Ratelimit-Remaining-Tokens %q", hdr.Get("X-Ratelimit-Remaining-Tokens"))
				}
				return n
			}
			r1 := left()
			if want := 10000 - in - 10; r1 != want {
				t.Fatalf("first: %d left, want %d (the estimate %d + max_tokens charged)", r1, want, in)
			}
			// Settled: used 500 + 3 against in + 10 charged.
			r2 := left()
			if want := r1 - (500 + 3 - in - 10) - in - 10; r2 != want {
				t.Errorf("second: %d left, want %d (the first settled with prompt_tokens 500, not the estimate %d)", r2, want, in)
			}
		})
	}
}

// TestScanRequestReadsChoices: n and best_of (the larger) are the
// answers a request asks for; below 1 is refused.
func TestScanRequestReadsChoices(t *testing.T) {
	for _, c := range []struct {
		api   openai.API
		extra string
		want  int32
	}{
		{openai.APIChat, ``, 1}, {openai.APIChat, `,"n":4`, 4}, {openai.APIChat, `,"n":null`, 1},
		{openai.APICompletions, `,"n":2,"best_of":5`, 5}, {openai.APIChat, `,"n":0`, -1}, {openai.APIChat, `,"n":-3`, -1},
	} {
		body := chatBody("m", false, "x", c.extra)
		if c.api == openai.APICompletions {
			body = `{"model":"m","prompt":"x"` + c.extra + `}`
		}
		r, err := ScanRequest([]byte(body), c.api, 512)
		switch {
		case c.want < 0 && err == nil:
			t.Errorf("%s: accepted, want a 400", c.extra)
		case c.want > 0 && (err != nil || r.Choices != c.want):
			t.Errorf("%s: Choices %d (%v), want %d", c.extra, r.Choices, err, c.want)
		}
	}
}

// TestAdminListenerApart: with the admin listener (AdminHandler), /health
// and /metrics answer there, GET and HEAD only, and no longer on the data
// port; other paths are not served there.
func TestAdminListenerApart(t *testing.T) {
	g := quickGateway(t, "http://127.0.0.1:1")
	defer g.Close()
	data := httptest.NewServer(g)
	defer data.Close()
	admin := httptest.NewServer(g.AdminHandler())
	defer admin.Close()
	for _, c := range []struct {
		base, method, path string
		want               int
	}{
		{admin.URL, http.MethodGet, "/health", http.StatusOK},
		{admin.URL, http.MethodHead, "/health", http.StatusOK},
		{admin.URL, http.MethodGet, "/metrics", http.StatusOK},
		{admin.URL, http.MethodPost, "/metrics", http.StatusMethodNotAllowed},
		{admin.URL, http.MethodDelete, "/health", http.StatusMethodNotAllowed},
		{admin.URL, http.MethodGet, "/v1/models", http.StatusNotFound},
		{data.URL, http.MethodGet, "/health", http.StatusNotFound},
		{data.URL, http.MethodGet, "/metrics", http.StatusNotFound},
	} {
		req, _ := http.NewRequest(c.method, c.base+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			where := "admin"
			if c.base == data.URL {
				where = "data"
			}
			t.Errorf("%s %s on the %s port: %d, want %d", c.method, c.path, where, resp.StatusCode, c.want)
		}
	}
}
