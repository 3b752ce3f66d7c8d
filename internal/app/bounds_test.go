package app

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openaitest"
)

// TestHeldAnswerIsBounded: an answer the application holds — whole, for a
// client that does not stream, or unchecked, for the blocking guardrail —
// is held up to max_response_bytes, no further: 502 (or an error event)
// upstream_response_too_large, the upstream's connection closed, and the
// allocations stay near the bound (the upstream sends 512 MiB).
func TestHeldAnswerIsBounded(t *testing.T) {
	for _, c := range []struct {
		name      string
		stream    bool
		guardrail string
	}{{"whole answer", false, GuardrailOff}, {"blocking guardrail", true, GuardrailBlocking}} {
		t.Run(c.name, func(t *testing.T) {
			up := openaitest.Start(t, &openaitest.Upstream{Endless: 512 << 20})
			srv := newTestServer(t, up.URL(), func(cfg *Config) {
				cfg.Guardrail, cfg.MaxResponseBytes = c.guardrail, 1<<20
			})
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":` + map[bool]string{true: "true", false: "false"}[c.stream] + `}`
			resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			runtime.ReadMemStats(&after)
			if !strings.Contains(string(b), `"code":"upstream_response_too_large"`) || !strings.Contains(string(b), "1048576 bytes") {
				t.Fatalf("status %d body %.300s, want upstream_response_too_large naming the bound", resp.StatusCode, b)
			}
			if !c.stream && resp.StatusCode != http.StatusBadGateway {
				t.Errorf("status %d, want 502", resp.StatusCode)
			}
			if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
				t.Errorf("allocated %d MiB for a 1 MiB bound", got>>20)
			}
			deadline := time.Now().Add(30 * time.Second)
			for up.Closed.Load() == 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if up.Closed.Load() != 1 {
				t.Error("the upstream's connection was not closed")
			}
		})
	}
}

// TestAnswerEndsForTheClientAtItsEnd: an upstream that keeps its
// connection open after its answer — after [DONE], or after the final
// usage chunk without [DONE] — does not hold the client: the answer
// arrives, whole, while the upstream still holds on, and the upstream's
// connection is closed.
func TestAnswerEndsForTheClientAtItsEnd(t *testing.T) {
	const content = `data: {"choices":[{"index":0,"delta":{"content":"hello"}}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
		`data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}` + "\n\n"
	for _, c := range []struct{ name, body string }{
		{"after [DONE]", content + "data: [DONE]\n\n"},
		{"usage chunk, no [DONE]", content},
	} {
		t.Run(c.name, func(t *testing.T) {
			const hold = 30 * time.Second
			release := make(chan struct{})
			gone := make(chan struct{}, 1)
			up := openaitest.Start(t, &openaitest.Upstream{Script: c.body, Hold: true, Release: release, Gone: gone})
			timer := time.AfterFunc(hold, func() { close(release) })
			defer timer.Stop()
			srv := newTestServer(t, up.URL(), func(cfg *Config) { cfg.Guardrail = GuardrailOff })
			resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
				strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !timer.Stop() {
				t.Fatalf("the client's answer ended only when the upstream let go (%v)", hold)
			}
			defer close(release)
			if resp.StatusCode != 200 || strings.Count(string(b), "[DONE]") != 1 || answerText(t, b, true) != "hello" {
				t.Fatalf("status %d:\n%s", resp.StatusCode, b)
			}
			select {
			case <-gone:
			case <-time.After(hold):
				t.Fatal("the upstream's connection was not closed")
			}
		})
	}
}

// TestUpstream413IsNotTheClients: the upstream's 413 is about the
// application's body (the question with the passages), not the client's:
// the client gets 502 upstream_request_too_large.
func TestUpstream413IsNotTheClients(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{Status: http.StatusRequestEntityTooLarge,
		ErrorBody: `{"error":{"message":"request body exceeds 1024 bytes","type":"invalid_request_error","code":"body_too_large"}}`})
	srv := newTestServer(t, up.URL(), nil)
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), `"code":"upstream_request_too_large"`) {
		t.Fatalf("status %d body %s, want 502 upstream_request_too_large", resp.StatusCode, b)
	}
}

// TestNegativeLimitsAreRefused: a negative deadline or connection cap
// would switch the protection off; it is refused, naming the field.
func TestNegativeLimitsAreRefused(t *testing.T) {
	for f, mod := range map[string]func(*Config){
		"body_timeout":        func(c *Config) { c.Limits.BodyTimeout = -time.Second },
		"read_header_timeout": func(c *Config) { c.Limits.ReadHeaderTimeout = -time.Second },
		"idle_timeout":        func(c *Config) { c.Limits.IdleTimeout = -time.Second },
		"max_connections":     func(c *Config) { c.Limits.MaxConns = -5 },
		"max_response_bytes":  func(c *Config) { c.MaxResponseBytes = -1 },
	} {
		c := DefaultConfig()
		c.Upstream = "http://127.0.0.1:8000"
		mod(&c)
		if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), f+" ") {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestUpstreamTimeEndsAtTheEndEvent: the client's [DONE] and the app's
// stages end when the upstream's end event arrives, not when the upstream
// lets go of its connection: the client reads its [DONE] while the
// upstream still holds its trailer back (before, the app waited for it,
// up to the grace, and counted the wait as app.upstream), and the trailer
// the upstream sends afterwards still reaches the client in the app's
// trailer. After a final usage chunk with no [DONE], app.upstream ends at
// the usage chunk: the wait for the [DONE] is the app's post_process.
func TestUpstreamTimeEndsAtTheEndEvent(t *testing.T) {
	const grace = 3 * time.Second
	const content = `data: {"choices":[{"index":0,"delta":{"content":"hello"}}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
		`data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}` + "\n\n"
	for _, c := range []struct {
		name string
		body string
		done bool
	}{{"[DONE], trailer held back", content + "data: [DONE]\n\n", true}, {"usage chunk, no [DONE]", content, false}} {
		t.Run(c.name, func(t *testing.T) {
			release := make(chan struct{})
			up := openaitest.Start(t, &openaitest.Upstream{Script: c.body, Timing: "server_queue;dur=7, prefill;dur=3", Hold: true, Release: release})
			cfg := DefaultConfig()
			cfg.Upstream, cfg.RetrievalLatency, cfg.Guardrail = up.URL(), "0", GuardrailOff
			cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
			s, err := NewServer(cfg)
			if err != nil {
				t.Fatal(err)
			}
			s.endGraceTest = grace
			srv := httptest.NewServer(s.Handler())
			t.Cleanup(srv.Close)
			resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
				strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			kept, err := openaitest.ReadToDone(resp.Body, latency.FinalTimingComment)
			if err != nil {
				t.Fatal(err)
			}
			close(release) // only now does the upstream send its trailer
			final := latency.ParseServerTiming([]string{string(kept)})
			if _, err := io.Copy(io.Discard, resp.Body); err != nil {
				t.Fatal(err)
			}
			tr := latency.ParseServerTiming(resp.Trailer.Values("Server-Timing"))
			for _, tm := range []map[latency.TimingName]time.Duration{final, tr} {
				if d, ok := tm[latency.TimingAppUpstream]; !ok || d >= grace/2 {
					t.Errorf("app.upstream %v (reported: %v), want it ended at the answer's end", d, ok)
				}
			}
			if !c.done {
				if d := tr[latency.TimingAppPostProcess]; d < grace/2 {
					t.Errorf("app.post_process %v, want the wait for [DONE] (%v) in it", d, grace)
				}
				return
			}
			if d := tr[latency.TimingAppTotal]; d >= grace/2 {
				t.Errorf("app.total %v, want it ended at [DONE]", d)
			}
			if tr[latency.TimingAppUpstream] != final[latency.TimingAppUpstream] {
				t.Errorf("app.upstream %v in the trailer, %v in the final event: want one instant", tr[latency.TimingAppUpstream], final[latency.TimingAppUpstream])
			}
			if d, ok := tr[latency.TimingServerQueue]; !ok || d != 7*time.Millisecond {
				t.Errorf("the upstream's trailer did not reach the client's: %v", resp.Trailer)
			}
		})
	}
}

// TestUpstreamRedirectIsNotFollowed: an upstream that answers 307 to a
// completion or to /v1/models is not followed: nothing reaches the
// redirect's target (no prompt, no upstream key), the client gets an
// error, not the target's body.
func TestUpstreamRedirectIsNotFollowed(t *testing.T) {
	var hits atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"elsewhere","object":"model"}]}`)
	}))
	defer target.Close()
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redirect.Close()
	srv := newTestServer(t, redirect.URL, nil)
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode < 400 {
		t.Errorf("completion: status %d body %.200s, want an error", resp.StatusCode, b)
	}
	resp, err = http.Get(srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), "elsewhere") {
		t.Errorf("/v1/models answered the redirect target's body: %.200s", b)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the redirect target got %d requests, want none", n)
	}
}
