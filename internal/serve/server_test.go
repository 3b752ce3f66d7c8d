package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/sse"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
)

const testModel = "sim-model"

// testConfig is a small engine whose every step takes step.
func testConfig(step time.Duration) Config {
	return Config{
		Engine: engine.Config{
			Model:       testModel,
			StepTimer:   engine.StepTimerFunc(func(*perfmodel.Batch) time.Duration { return step }),
			BlockSize:   16,
			NumBlocks:   512,
			MaxModelLen: 2048,
			MaxNumSeqs:  64,
			Seed:        1,
		},
	}
}

func startServer(t testing.TB, cfg Config) *Server {
	t.Helper()
	s, err := Start(context.Background(), cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func post(t testing.TB, ctx context.Context, url, body string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// events reads a whole SSE body.
func events(t testing.TB, r io.Reader) []string {
	t.Helper()
	rd := sse.NewReader(r, func() int64 { return 0 }, 0)
	var out []string
	for {
		ev, err := rd.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(ev.Data))
	}
}

func TestChatStreamFramingAndUsage(t *testing.T) {
	s := startServer(t, testConfig(time.Millisecond))
	body := `{"model":"sim-model","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Hi!"}],
		"max_tokens":7,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`
	resp := post(t, context.Background(), s.URL()+"/chat/completions", body, RequestIDHeader, "abc-1")
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if got := resp.Header.Get(RequestIDHeader); got != "abc-1" {
		t.Errorf("X-Request-Id %q, want echo", got)
	}
	evs := events(t, resp.Body)
	if len(evs) < 4 || evs[len(evs)-1] != "[DONE]" {
		t.Fatalf("events %q", evs)
	}
	const prompt = 8 // 1 + "You are terse ." + 1 + "Hi !" (docs/tokenizer.md)
	var role openai.ChatCompletionChunk
	if err := json.Unmarshal([]byte(evs[0]), &role); err != nil {
		t.Fatal(err)
	}
	if role.Choices[0].Delta.Role != "assistant" || *role.Choices[0].Delta.Content != "" || role.ID != "chatcmpl-abc-1" {
		t.Errorf("first chunk is not role-only: %s", evs[0])
	}
	if diff := cmp.Diff(&openai.Usage{PromptTokens: prompt, TotalTokens: prompt}, role.Usage); diff != "" {
		t.Errorf("role chunk usage (-want +got):\n%s", diff)
	}
	var text strings.Builder
	completion := 0
	for i, e := range evs[1 : len(evs)-2] {
		var c openai.ChatCompletionChunk
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatal(err)
		}
		n := tokenizer.Count(*c.Choices[0].Delta.Content)
		completion += n
		text.WriteString(*c.Choices[0].Delta.Content)
		want := &openai.Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
		if diff := cmp.Diff(want, c.Usage); diff != "" {
			t.Errorf("chunk %d continuous usage (-want +got):\n%s", i, diff)
		}
		last := i == len(evs)-4
		if fr := c.Choices[0].FinishReason; last != (fr != nil) || (last && *fr != "length") {
			t.Errorf("chunk %d finish_reason %v", i, fr)
		}
	}
	if n := tokenizer.Count(text.String()); n != 7 {
		t.Errorf("streamed text %q is %d tokens, want 7", text.String(), n)
	}
	var final openai.ChatCompletionChunk
	if err := json.Unmarshal([]byte(evs[len(evs)-2]), &final); err != nil {
		t.Fatal(err)
	}
	want := &openai.Usage{PromptTokens: prompt, CompletionTokens: 7, TotalTokens: prompt + 7,
		PromptTokensDetails: &openai.PromptTokensDetails{}}
	if diff := cmp.Diff(want, final.Usage); diff != "" || len(final.Choices) != 0 || final.Metrics != nil {
		t.Errorf("usage chunk %s (-want +got):\n%s", evs[len(evs)-2], diff)
	}
	st := resp.Trailer.Get(ServerTimingHeader)
	for _, stage := range []string{"frontend;dur=", "server_queue;dur=", "prefill;dur=", "server_decode;dur="} {
		if !strings.Contains(st, stage) {
			t.Errorf("Server-Timing trailer %q lacks %s", st, stage)
		}
	}
}

func TestStreamWithoutUsage(t *testing.T) {
	s := startServer(t, testConfig(time.Millisecond))
	resp := post(t, context.Background(), s.URL()+"/completions",
		`{"model":"sim-model","prompt":"one two three","max_tokens":4,"ignore_eos":true,"stream":true}`)
	defer resp.Body.Close()
	evs := events(t, resp.Body)
	if evs[len(evs)-1] != "[DONE]" {
		t.Fatalf("no [DONE]: %q", evs)
	}
	var text strings.Builder
	for _, e := range evs[:len(evs)-1] {
		var c openai.CompletionChunk
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatal(err)
		}
		if c.Usage != nil || c.Object != "text_completion" || len(c.Choices) != 1 {
			t.Errorf("unexpected chunk %s", e)
		}
		text.WriteString(c.Choices[0].Text)
	}
	if n := tokenizer.Count(text.String()); n != 4 {
		t.Errorf("text %q: %d tokens, want 4", text.String(), n)
	}
	if resp.Header.Get(RequestIDHeader) == "" {
		t.Error("no generated X-Request-Id")
	}
}

func TestNonStreamingWithMetrics(t *testing.T) {
	s := startServer(t, testConfig(2*time.Millisecond))
	resp := post(t, context.Background(), s.URL()+"/chat/completions",
		`{"model":"sim-model","messages":[{"role":"user","content":"a b c d"}],"max_completion_tokens":5,"min_tokens":5}`,
		MetricsHeader, "true")
	defer resp.Body.Close()
	var c openai.ChatCompletion
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || c.Object != "chat.completion" || len(c.Choices) != 1 {
		t.Fatalf("status %d body %+v", resp.StatusCode, c)
	}
	if n := tokenizer.Count(string(c.Choices[0].Message.Content)); n != 5 || c.Usage.CompletionTokens != 5 || c.Usage.PromptTokens != 5 || c.Usage.TotalTokens != 10 {
		t.Errorf("content %q (%d tokens), usage %+v", c.Choices[0].Message.Content, n, c.Usage)
	}
	m := c.Metrics
	if m == nil {
		t.Fatal("no metrics object")
	}
	// Five tokens from five 2 ms steps: decode spans four steps.
	if m.CompletionTokens != 5 || m.PromptTokens != 5 || m.GenerationTimeMs < 8 || m.MeanITLMs < 2 ||
		m.TimeToFirstTokenMs < m.QueueTimeMs+m.PrefillTimeMs || m.E2ETimeMs < m.TimeToFirstTokenMs+m.GenerationTimeMs-0.001 {
		t.Errorf("metrics %+v", m)
	}
	if d := m.GenerationTimeMs/4 - m.MeanITLMs; d > 1e-9 || d < -1e-9 {
		t.Errorf("mean_itl_ms %g, want generation_time_ms/4 = %g", m.MeanITLMs, m.GenerationTimeMs/4)
	}
	if resp.Header.Get(ServerTimingHeader) == "" || resp.Trailer.Get(ServerTimingHeader) == "" {
		t.Errorf("Server-Timing header %q trailer %q", resp.Header.Get(ServerTimingHeader), resp.Trailer.Get(ServerTimingHeader))
	}
}

func TestBadInput(t *testing.T) {
	cfg := testConfig(time.Millisecond)
	cfg.MaxBodyBytes = 16 << 10
	s := startServer(t, cfg)
	long := tokenizer.Filler(2100, 1)
	tests := []struct {
		name, path, body string
		status           int
		param, code      string
	}{
		{"malformed JSON", "/chat/completions", `{"model":`, 400, "", ""},
		{"missing model", "/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`, 400, "model", ""},
		{"missing messages", "/chat/completions", `{"model":"sim-model"}`, 400, "messages", ""},
		{"missing prompt", "/completions", `{"model":"sim-model"}`, 400, "prompt", ""},
		{"unknown model", "/chat/completions", `{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`, 404, "model", "model_not_found"},
		{"n 3", "/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"x"}],"n":3}`, 400, "n", ""},
		{"negative max_tokens", "/completions", `{"model":"sim-model","prompt":"x","max_tokens":-1}`, 400, "max_tokens", ""},
		{"absurd max_tokens", "/completions", `{"model":"sim-model","prompt":"x","max_tokens":1000000}`, 400, "prompt", "context_length_exceeded"},
		{"wrong type", "/completions", `{"model":"sim-model","prompt":"x","max_tokens":"many"}`, 400, "max_tokens", ""},
		{"prompt longer than max_model_len", "/completions", `{"model":"sim-model","prompt":"` + long + `"}`, 400, "prompt", "context_length_exceeded"},
		{"body over limit", "/completions", `{"model":"sim-model","prompt":"` + tokenizer.Filler(4000, 1) + `"}`, 413, "", "request_too_large"},
		{"token id outside vocabulary", "/completions", `{"model":"sim-model","prompt":[1,999999]}`, 400, "prompt", ""},
		{"white-space prompt", "/completions", `{"model":"sim-model","prompt":"   "}`, 400, "prompt", ""},
	}
	// A long request runs throughout: bad input must not disturb it.
	okDone := make(chan error, 1)
	go func() {
		resp := post(t, context.Background(), s.URL()+"/completions", `{"model":"sim-model","prompt":"x","max_tokens":200,"ignore_eos":true,"stream":true}`)
		defer resp.Body.Close()
		evs := events(t, resp.Body)
		if resp.StatusCode != 200 || evs[len(evs)-1] != "[DONE]" {
			okDone <- fmt.Errorf("concurrent request: status %d, %d events", resp.StatusCode, len(evs))
			return
		}
		okDone <- nil
	}()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, context.Background(), s.URL()+tt.path, tt.body)
			defer resp.Body.Close()
			var e openai.ErrorBody
			raw, _ := io.ReadAll(resp.Body)
			if err := json.Unmarshal(raw, &e); err != nil {
				t.Fatalf("status %d, body %s: %v", resp.StatusCode, raw, err)
			}
			if resp.StatusCode != tt.status || e.Error.Message == "" || e.Error.Type == "" {
				t.Errorf("status %d, body %s", resp.StatusCode, raw)
			}
			var param, code string
			if e.Error.Param != nil {
				param = *e.Error.Param
			}
			if e.Error.Code != nil {
				code = *e.Error.Code
			}
			if param != tt.param || (tt.code != "" && code != tt.code) {
				t.Errorf("param %q code %q, want %q %q: %s", param, code, tt.param, tt.code, raw)
			}
			if resp.Trailer.Get(ServerTimingHeader) == "" {
				t.Error("no Server-Timing trailer on an error")
			}
		})
	}
	if err := <-okDone; err != nil {
		t.Error(err)
	}
}

func TestRoutes(t *testing.T) {
	s := startServer(t, testConfig(time.Millisecond))
	base := strings.TrimSuffix(s.URL(), "/v1")
	get := func(path string) (int, []byte) {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, _ := get("/health"); code != 200 {
		t.Errorf("/health: %d", code)
	}
	code, b := get("/v1/models")
	var list openai.ModelList
	if err := json.Unmarshal(b, &list); err != nil || code != 200 {
		t.Fatalf("/v1/models: %d %s", code, b)
	}
	want := openai.ModelList{Object: "list", Data: []openai.Model{{ID: testModel, Object: "model", Created: list.Data[0].Created, OwnedBy: "tokentrace", MaxModelLen: 2048}}}
	if diff := cmp.Diff(want, list); diff != "" {
		t.Errorf("/v1/models (-want +got):\n%s", diff)
	}
	if code, _ := get("/v1/models/" + testModel); code != 200 {
		t.Errorf("/v1/models/%s: %d", testModel, code)
	}
	for path, wantCode := range map[string]int{"/v1/models/nope": 404, "/v1/nothing": 404, "/v1/chat/completions": 405} {
		code, b := get(path)
		var e openai.ErrorBody
		if code != wantCode || json.Unmarshal(b, &e) != nil || e.Error.Message == "" {
			t.Errorf("GET %s: %d %s, want %d with an OpenAI error", path, code, b, wantCode)
		}
	}
	resp, err := http.Post(base+"/health", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /health: %d, Allow %q; want 405, Allow \"GET, HEAD\"", resp.StatusCode, resp.Header.Get("Allow"))
	}
	code, b = get("/metrics")
	if code != 200 || !bytes.Contains(b, []byte("vllm:num_requests_running")) {
		t.Errorf("/metrics: %d %s", code, b)
	}
}

// TestDisconnectFreesBlocks checks that a client going away mid-stream
// aborts its request and frees its KV blocks.
func TestDisconnectFreesBlocks(t *testing.T) {
	s := startServer(t, testConfig(2*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	resp := post(t, ctx, s.URL()+"/chat/completions",
		`{"model":"sim-model","messages":[{"role":"user","content":"`+tokenizer.Filler(300, 2)+`"}],"max_tokens":1500,"ignore_eos":true,"stream":true}`)
	rd := sse.NewReader(resp.Body, func() int64 { return 0 }, 0)
	for range 3 { // role chunk and two content chunks
		if _, err := rd.Next(); err != nil {
			t.Fatal(err)
		}
	}
	st := s.Engine().Stats()
	if st.Running != 1 || st.KVUsage == 0 {
		t.Fatalf("while streaming: %+v", st)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st = s.Engine().Stats()
		if st.Running == 0 && st.Waiting == 0 && st.KVUsage == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("blocks not freed after disconnect: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestQueueFull(t *testing.T) {
	for _, status := range []int{429, 503} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			// 1,000 steps of 50 ms: the running request outlasts any
			// scheduling delay of a busy machine (cancel ends it).
			cfg := testConfig(50 * time.Millisecond)
			cfg.Engine.MaxNumSeqs = 1
			cfg.Engine.MaxWaiting = 1
			cfg.QueueFullStatus = status
			s := startServer(t, cfg)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			long := `{"model":"sim-model","prompt":"x","max_tokens":1000,"ignore_eos":true,"stream":true}`
			var wg sync.WaitGroup
			wait := func(cond func(engine.Stats) bool) {
				for deadline := time.Now().Add(5 * time.Second); !cond(s.Engine().Stats()); time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("engine never reached the state: %+v", s.Engine().Stats())
					}
				}
			}
			// The first request must be running before the second is sent:
			// while it still waits, it alone fills the one waiting place.
			for _, want := range []func(engine.Stats) bool{
				func(st engine.Stats) bool { return st.Running == 1 },
				func(st engine.Stats) bool { return st.Running == 1 && st.Waiting == 1 },
			} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Ended by cancel below, maybe before any header came:
					// an error here is expected.
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/completions", strings.NewReader(long))
					if resp, err := http.DefaultClient.Do(req); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}()
				wait(want)
			}
			resp := post(t, context.Background(), s.URL()+"/completions", long)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != status || resp.Header.Get("Retry-After") != "1" || !bytes.Contains(b, []byte(`"queue_full"`)) {
				t.Errorf("status %d, Retry-After %q, body %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
			}
			cancel()
			wg.Wait()
		})
	}
}

func TestStartRejectsConfigThatCannotRun(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"block size 0 after defaults", func(c *Config) { c.Engine.BlockSize = -1 }, "block_size"},
		{"no KV blocks", func(c *Config) { c.Engine.NumBlocks = 0 }, "blocks"},
		{"budget below one block", func(c *Config) { c.Engine.MaxNumBatchedTokens = 8 }, "below one block"},
		{"queue-full status", func(c *Config) { c.QueueFullStatus = 500 }, "429 or 503"},
		{"fault rates", func(c *Config) { c.Faults.Rate429, c.Faults.Rate500 = 0.7, 0.7 }, "sum"},
		{"negative grace", func(c *Config) { c.Grace = -time.Second }, "grace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(time.Millisecond)
			tt.mutate(&cfg)
			_, err := Start(context.Background(), cfg, "127.0.0.1:0")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Start: %v, want an error about %q", err, tt.want)
			}
		})
	}
}

// TestGraceLetsStreamsFinish: with a grace, a stop lets the stream in
// flight run to its end (finish reason length) when the grace is long
// enough, and ends it with finish reason abort when it is not (a 2,000-token
// stream at 2 ms a step cannot finish within 20 ms).
func TestGraceLetsStreamsFinish(t *testing.T) {
	for _, tc := range []struct {
		grace     time.Duration
		maxTokens int
		want      string
	}{
		{time.Minute, 500, `"finish_reason":"length"`},
		{20 * time.Millisecond, 2000, `"finish_reason":"abort"`},
	} {
		cfg := testConfig(2 * time.Millisecond)
		cfg.Grace = tc.grace
		last, _, err := closeMidStream(t, cfg, tc.maxTokens)
		if !strings.Contains(last, tc.want) {
			t.Errorf("grace %v: last chunk %s, want %s", tc.grace, last, tc.want)
		}
		if err != nil {
			t.Errorf("grace %v: Close: %v", tc.grace, err)
		}
	}
}

// lastChunk reads a stream to its end and returns its last event before
// [DONE]; a stream that ends other than at EOF fails the test.
func lastChunk(t *testing.T, rd *sse.Reader) string {
	t.Helper()
	var last string
	for {
		ev, err := rd.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("stream ended with %v", err)
			}
			return last
		}
		if string(ev.Data) != "[DONE]" {
			last = string(ev.Data)
		}
	}
}

func TestCloseEndsStreams(t *testing.T) {
	last, trailer, err := closeMidStream(t, testConfig(2*time.Millisecond), 2000)
	if !strings.Contains(last, `"finish_reason":"abort"`) {
		t.Errorf("last chunk %s, want finish_reason abort", last)
	}
	if trailer.Get(ServerTimingHeader) == "" {
		t.Error("the response was cut before its trailer")
	}
	if err != nil {
		t.Error(err)
	}
}

// closeMidStream starts a server with cfg, opens a stream of maxTokens
// tokens, closes the server once the first event arrived, and returns the
// stream's last chunk before [DONE], its trailer and Close's error.
func closeMidStream(t *testing.T, cfg Config, maxTokens int) (last string, trailer http.Header, closeErr error) {
	t.Helper()
	s, err := Start(context.Background(), cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	resp := post(t, context.Background(), s.URL()+"/completions",
		fmt.Sprintf(`{"model":"sim-model","prompt":"x","max_tokens":%d,"ignore_eos":true,"stream":true}`, maxTokens))
	defer resp.Body.Close()
	rd := sse.NewReader(resp.Body, func() int64 { return 0 }, 0)
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	last = lastChunk(t, rd)
	return last, resp.Trailer, <-done
}

// TestPriorityReachesTheEngine: under the priority policy a waiting request
// with a lower priority value is scheduled before an earlier one with a
// higher value.
func TestPriorityReachesTheEngine(t *testing.T) {
	cfg := testConfig(2 * time.Millisecond)
	cfg.Engine.MaxNumSeqs = 1
	cfg.Engine.Policy = engine.PolicyPriority
	s := startServer(t, cfg)
	wait := func(cond func(engine.Stats) bool) {
		t.Helper()
		if !waitFor(5*time.Second, func() bool { return cond(s.Engine().Stats()) }) {
			t.Fatalf("engine state %+v", s.Engine().Stats())
		}
	}
	// The first request runs until the two others wait (2 s of steps: a
	// busy machine's delays cannot end it first), then leaves.
	first := make(chan struct{})
	ctx, leave := context.WithCancel(context.Background())
	defer leave()
	go func() {
		defer close(first)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/completions",
			strings.NewReader(`{"model":"sim-model","prompt":"a","max_tokens":1000,"ignore_eos":true,"stream":true}`))
		if resp, err := http.DefaultClient.Do(req); err == nil { // an error is the leaving
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	wait(func(st engine.Stats) bool { return st.Running == 1 })
	type result struct {
		name string
		m    *openai.RequestMetrics
	}
	results := make(chan result, 2)
	send := func(name string, priority int) {
		go func() {
			resp := post(t, context.Background(), s.URL()+"/completions",
				fmt.Sprintf(`{"model":"sim-model","prompt":"b","max_tokens":3,"ignore_eos":true,"priority":%d,"return_metrics":true}`, priority))
			defer resp.Body.Close()
			var c openai.Completion
			if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
				t.Error(err)
			}
			results <- result{name, c.Metrics}
		}()
	}
	send("low-urgency", 5)
	wait(func(st engine.Stats) bool { return st.Waiting == 1 })
	send("urgent", -1)
	wait(func(st engine.Stats) bool { return st.Waiting == 2 })
	leave()
	<-first
	scheduled := map[string]float64{}
	for range 2 {
		r := <-results
		if r.m == nil {
			t.Fatalf("%s: no metrics", r.name)
		}
		scheduled[r.name] = r.m.ArrivalTime*1e3 + r.m.FrontendTimeMs + r.m.QueueTimeMs
	}
	if scheduled["urgent"] >= scheduled["low-urgency"] {
		t.Errorf("priority -1 scheduled at %.3f ms, priority 5 at %.3f ms: want the urgent one first", scheduled["urgent"], scheduled["low-urgency"])
	}
}
