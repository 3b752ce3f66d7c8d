package app

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openaitest"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
)

// The stages partition the handler's time exactly (docs/metrics.md,
// "Application stages", worked example).
func TestStagesByHand(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	ms := func(x float64) time.Time { return t0.Add(time.Duration(x * float64(time.Millisecond))) }
	tl := timeline{start: t0, parsed: ms(0.5), retrieved: ms(40.5), reranked: ms(41), prompted: ms(41.5), end: ms(241.5),
		upstream: 180 * time.Millisecond, guardrail: 16 * time.Millisecond, backpressure: 1 * time.Millisecond}
	got := tl.stages()
	want := stages{In: 500 * time.Microsecond, Retrieval: 40 * time.Millisecond, Rerank: 500 * time.Microsecond, Prompt: 500 * time.Microsecond,
		Upstream: 180 * time.Millisecond, Guardrail: 16 * time.Millisecond, Post: 3 * time.Millisecond, Backpressure: time.Millisecond}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stages (-want +got):\n%s", diff)
	}
	if got.sum() != 241500*time.Microsecond {
		t.Errorf("sum %v, want 241.5 ms", got.sum())
	}
	if h, f := got.headerTiming(), got.finalTiming("server_queue;dur=1.000"); h != "app.in;dur=0.500, app.retrieval;dur=40.000, app.rerank;dur=0.500, app.prompt;dur=0.500" ||
		f != "app.upstream;dur=180.000, app.guardrail;dur=16.000, app.post_process;dur=3.000, app.backpressure;dur=1.000, app.total;dur=241.500, server_queue;dur=1.000" {
		t.Errorf("header %q\nfinal %q", h, f)
	}
	// A request refused while being read: every later instant collapses.
	early := timeline{start: t0, end: ms(2)}
	if s := early.stages(); s.sum() != 2*time.Millisecond || s.Post != 2*time.Millisecond {
		t.Errorf("early stages %+v", s)
	}
}

// gateClock is a clock whose sleeps block until the test releases them,
// so a test can see how many retrieval calls wait at once.
type gateClock struct {
	mu       sync.Mutex
	sleeping int
	most     int
	release  chan struct{}
}

func (c *gateClock) Now() time.Time { return time.Unix(0, 0) }

func (c *gateClock) Sleep(ctx context.Context, d time.Duration) error {
	if d == 0 {
		return nil
	}
	c.mu.Lock()
	c.sleeping++
	c.most = max(c.most, c.sleeping)
	c.mu.Unlock()
	defer func() { c.mu.Lock(); c.sleeping--; c.mu.Unlock() }()
	select {
	case <-c.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *gateClock) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sleeping
}

// Sequential retrieval has one call in flight at a time, parallel all of
// them: the stage lasts the sum of the calls' latencies, or the longest.
func TestRetrievalSequentialOrParallel(t *testing.T) {
	for mode, want := range map[string]int{RetrievalSequential: 1, RetrievalParallel: 4} {
		clock := &gateClock{release: make(chan struct{})}
		cfg := DefaultConfig()
		cfg.Upstream, cfg.Retrieval, cfg.Clock, cfg.Sources = "http://127.0.0.1:1", mode, clock, 4
		s, err := NewServer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan []Hit)
		go func() {
			hits, _, err := s.retrieve(context.Background(), "what does prefix caching reuse")
			if err != nil {
				t.Error(err)
			}
			done <- hits
		}()
		// Wait until want calls sleep at once (parallel: all of them;
		// sequential: one), release them, and again until all are done.
		for range 4 / want {
			deadline := time.Now().Add(10 * time.Second)
			for clock.count() < want {
				if time.Now().After(deadline) {
					t.Fatalf("%s: %d calls waiting, never %d", mode, clock.count(), want)
				}
				time.Sleep(100 * time.Microsecond)
			}
			for range want {
				clock.release <- struct{}{}
			}
		}
		hits := <-done
		if clock.most != want || len(hits) != 4*cfg.Candidates {
			t.Errorf("%s: at most %d calls waited at once (want %d); %d hits", mode, clock.most, want, len(hits))
		}
	}
}

// Retrieval finds passages about the question, and every passage kept
// lengthens the prompt the model prefills.
func TestRetrievedPassagesLengthenThePrompt(t *testing.T) {
	ix := NewIndex(corpusText, 4)
	q := "How does prefix caching reuse the key-value blocks of a shared system prompt?"
	var cands []Hit
	for i := range 4 {
		cands = append(cands, ix.Search(i, embed(q), 4)...)
	}
	top := Rerank(q, cands, 2)
	if !strings.Contains(top[0].P.Text, "Prefix caching") {
		t.Errorf("best passage %q", top[0].P.Text)
	}
	prev := 0
	for _, k := range []int{0, 1, 2, 4, 8} {
		msgs := prompt(nil, Rerank(q, cands, k))
		n := tokenizer.Count(string(msgs[0].Content))
		if k > 0 && n <= prev+40 {
			t.Errorf("top %d: prompt of %d tokens, not longer than %d by a passage", k, n, prev)
		}
		prev = n
	}
}

// fakeUpstream streams a fixed answer (words joined by spaces) with its
// usage and Server-Timing, as a model server would.
func fakeUpstream(t *testing.T, words []string) *openaitest.Upstream {
	t.Helper()
	spaced := make([]string, len(words))
	for i, w := range words {
		if i > 0 {
			w = " " + w
		}
		spaced[i] = w
	}
	return openaitest.Start(t, &openaitest.Upstream{Words: spaced, UsageChunk: true, PromptTokens: 300,
		Timing: "frontend;dur=0.1, server_queue;dur=0.2, prefill;dur=0.3, server_decode;dur=0.4"})
}

func newTestServer(t *testing.T, upstream string, mod func(*Config)) *httptest.Server {
	cfg := DefaultConfig()
	cfg.Upstream, cfg.RetrievalLatency = upstream, "0"
	cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	if mod != nil {
		mod(&cfg)
	}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv
}

// Every guardrail mode gives the client the same answer (blocked words
// masked alike), streamed or whole, with the application's stages and the
// upstream's in Server-Timing.
func TestGuardrailModesAnswerAlike(t *testing.T) {
	words := []string{"the", "password", "is", "hunter2", "and", "mail", "ops@example.com", "now"}
	up := fakeUpstream(t, words)
	for _, mode := range []string{GuardrailBlocking, GuardrailStreaming} {
		for _, stream := range []bool{true, false} {
			srv := newTestServer(t, up.URL(), func(c *Config) { c.Guardrail, c.Blocklist = mode, []string{"hunter2", "password"} })
			body := `{"model":"m","messages":[{"role":"user","content":"what is the password"}],"max_tokens":8,"stream":` + map[bool]string{true: "true", false: "false"}[stream] + `}`
			resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			text := answerText(t, b, stream)
			if want := "the [filtered] is [filtered] and mail [filtered] now"; text != want {
				t.Errorf("%s stream=%v: answer %q, want %q", mode, stream, text, want)
			}
			st, notes := latency.ParseTiming(latency.TimingValues{Header: resp.Header.Values("Server-Timing"), Trailer: resp.Trailer.Values("Server-Timing")})
			if len(notes) > 0 {
				t.Errorf("%s stream=%v: notes %q", mode, stream, notes)
			}
			names := map[string]bool{}
			for _, s := range st {
				names[string(s.Hop)+"."+s.Name] = true
			}
			for _, n := range []string{"app.in", "app.retrieval", "app.rerank", "app.prompt", "app.upstream", "app.guardrail", "app.post_process", "app.backpressure", "app.total", "server.prefill", "server.server_decode"} {
				if !names[n] {
					t.Errorf("%s stream=%v: %s missing from %v", mode, stream, n, st)
				}
			}
		}
	}
}

// answerText is the content of a streamed or whole chat answer.
func answerText(t *testing.T, b []byte, stream bool) string {
	t.Helper()
	if !stream {
		var c struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(b, &c); err != nil || len(c.Choices) == 0 {
			t.Fatalf("body %s: %v", b, err)
		}
		return c.Choices[0].Message.Content
	}
	var out strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("event %s: %v", data, err)
		}
		for _, ch := range c.Choices {
			out.WriteString(ch.Delta.Content)
		}
	}
	return out.String()
}

// Bad input gets OpenAI's error shape with the stages so far; an
// unreachable upstream is a 502 that names neither its password nor the
// application's key; an upstream's own error is passed on.
func TestErrors(t *testing.T) {
	srv := newTestServer(t, "http://user:pw-secret-1@127.0.0.1:1", func(c *Config) { c.APIKey = "sk-app-secret-999" })
	for _, tc := range []struct {
		body   string
		status int
		code   string
	}{
		{`{"model":"m","messages":[]}`, 400, ""},
		{`not json`, 400, ""},
		{`{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 502, "upstream_unreachable"},
	} {
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Error struct {
				Message, Type string
				Code          *string
			}
		}
		if resp.StatusCode != tc.status || json.Unmarshal(b, &e) != nil || e.Error.Message == "" {
			t.Errorf("%s: %d %s", tc.body, resp.StatusCode, b)
		}
		if tc.code != "" && (e.Error.Code == nil || *e.Error.Code != tc.code) {
			t.Errorf("%s: code %v", tc.body, e.Error.Code)
		}
		if strings.Contains(string(b), "pw-secret-1") || strings.Contains(string(b), "sk-app-secret") {
			t.Errorf("%s: a secret in %s", tc.body, b)
		}
		if !strings.Contains(resp.Header.Get("Server-Timing"), "app.in;dur=") {
			t.Errorf("%s: Server-Timing %q", tc.body, resp.Header.Get("Server-Timing"))
		}
	}
	busy := openaitest.Start(t, &openaitest.Upstream{Status: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"1"}},
		ErrorBody: `{"error":{"message":"queue full","type":"rate_limit_error"}}`})
	resp, err := http.Post(newTestServer(t, busy.URL(), nil).URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || !strings.Contains(string(b), "queue full") || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("upstream 429 passed on as %d %s", resp.StatusCode, b)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	for f, mod := range map[string]func(*Config){
		"upstream":          func(c *Config) { c.Upstream = "" },
		"sources":           func(c *Config) { c.Sources = 0 },
		"retrieval":         func(c *Config) { c.Retrieval = "random" },
		"retrieval_latency": func(c *Config) { c.RetrievalLatency = "20" },
		"top_k":             func(c *Config) { c.TopK = 99 },
		"guardrail":         func(c *Config) { c.Guardrail = "maybe" },
		"guardrail_cost":    func(c *Config) { c.GuardrailCost = -1 },
	} {
		c := DefaultConfig()
		c.Upstream = "http://127.0.0.1:8000"
		mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("%s: %v", f, err)
		}
	}
}
