package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/openaitest"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
)

var update = flag.Bool("update", false, "rewrite golden files")

// handTimeline is the worked example of docs/metrics.md, "Gateway stages".
func handTimeline() *timeline {
	t0 := time.Unix(1000, 0)
	us := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Microsecond) }
	return &timeline{
		start: t0, in: us(100), admitted: us(100), conn: us(150), firstTok: us(20150), end: us(100200),
		post: 30 * time.Microsecond, backpressure: 20 * time.Microsecond,
		serverQueue: 5 * time.Millisecond, serverPrefill: 10 * time.Millisecond, serverSplit: true,
	}
}

func TestStagesPartitionByHand(t *testing.T) {
	tl := handTimeline()
	got := tl.stages()
	want := stageDurations{In: 100 * time.Microsecond, Connect: 50 * time.Microsecond, UpstreamTTFT: 20 * time.Millisecond,
		Decode: 80 * time.Millisecond, Post: 30 * time.Microsecond, Backpressure: 20 * time.Microsecond}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("stages (-want +got):\n%s", d)
	}
	if got.sum() != 100200*time.Microsecond {
		t.Errorf("sum %v, want E2E 100.2 ms", got.sum())
	}
	if h := headerTiming(got); h != "gateway_in;dur=0.100, gateway_queue;dur=0.000, connect;dur=0.050, upstream_ttft;dur=20.000" {
		t.Errorf("header timing %q", h)
	}
	if tr := tl.trailerTiming(got); tr != "decode;dur=80.000, post_process;dur=0.030, backpressure;dur=0.020, server_queue;dur=5.000, prefill;dur=10.000, network;dur=5.000, total;dur=100.200" {
		t.Errorf("trailer timing %q", tr)
	}
	// A request rejected in the queue: unreached instants collapse, the
	// partition still sums to end − start.
	r := &timeline{start: tl.start, in: tl.in, end: tl.start.Add(3 * time.Millisecond)}
	if s := r.stages(); s.sum() != 3*time.Millisecond || s.In != 100*time.Microsecond || s.Decode != 2900*time.Microsecond {
		t.Errorf("rejected request stages %+v", s)
	}
}

// TestChunkGapsAndITLsByHand: three content events 10 ms apart carrying
// 2, 2 and 3 tokens give chunk gaps 10, 10 ms and the ITLs 0 (the first
// event's second token), 5, 5, then 10/3 ms three times (3 333 334 +
// 3 333 333 + 3 333 333 ns): 6 gaps summing to 20 ms.
func TestChunkGapsAndITLsByHand(t *testing.T) {
	m := NewMetrics()
	tl := handTimeline()
	m.observe(&observation{pool: "p", model: "m", status: 200, stream: true, stages: tl.stages(), tl: tl,
		ttft: time.Millisecond, outTokens: 7, chunkNS: []int64{1e6, 11e6, 21e6}, chunkTokens: []int32{2, 2, 3}})
	for _, c := range []struct {
		name  string
		h     *prometheus.HistogramVec
		count uint64
		sum   float64
	}{{"chunk gap", m.ChunkGap, 2, 0.020}, {"itl", m.ITL, 6, 0.020}} {
		var d dto.Metric
		if err := c.h.WithLabelValues("p", "m").(prometheus.Histogram).Write(&d); err != nil {
			t.Fatal(err)
		}
		if got := d.GetHistogram().GetSampleCount(); got != c.count {
			t.Errorf("%s: %d samples, want %d", c.name, got, c.count)
		}
		if got := d.GetHistogram().GetSampleSum(); got < c.sum-1e-9 || got > c.sum+1e-9 {
			t.Errorf("%s: sum %v s, want %v", c.name, got, c.sum)
		}
	}
}

func TestGoldenMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	tl := handTimeline()
	m.observe(&observation{pool: "p", model: "m", status: 200, stream: true, stages: tl.stages(), tl: tl,
		ttft: 20150 * time.Microsecond, outTokens: 5, chunkNS: []int64{20150e3, 40150e3, 70150e3}})
	m.observe(&observation{pool: "p", model: "m", status: 429, stages: stageDurations{In: 40 * time.Microsecond}, tl: &timeline{}})
	// Hand-computed: TPOT = (100.2 − 20.15) ms / (5 − 1) = 20.0125 ms.
	if got := testutil.ToFloat64(m.Requests.WithLabelValues("p", "m", "429")); got != 1 {
		t.Errorf("429 count %v", got)
	}
	names := []string{"gen_ai_server_time_to_first_token_seconds", "gen_ai_server_time_per_output_token_seconds",
		"gen_ai_server_request_duration_seconds", "tokentrace_gateway_requests_total", "tokentrace_gateway_stage_gateway_in_seconds",
		"tokentrace_gateway_stage_network_seconds", "tokentrace_gateway_chunk_gap_seconds"}
	golden := filepath.Join("testdata", "metrics.golden")
	if *update {
		rec := httptest.NewRecorder()
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		var keep []string
		for _, block := range strings.Split(rec.Body.String(), "# HELP ") {
			for _, n := range names {
				if strings.HasPrefix(block, n+" ") {
					keep = append(keep, "# HELP "+block)
				}
			}
		}
		if err := os.WriteFile(golden, []byte(strings.Join(keep, "")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(golden)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := testutil.GatherAndCompare(reg, f, names...); err != nil {
		t.Error(err)
	}
}

func TestConfigValidation(t *testing.T) {
	ok := `pools: [{name: p, replicas: [{url: "http://h:1"}]}]
routes: [{model: "*", pool: p}]`
	c, err := ParseConfig([]byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	if c.Pools[0].Balancer != "least_outstanding" || c.Pools[0].Queue.MaxSize != 1024 || c.Server.MaxBodyBytes != 4<<20 || c.Routes[0].Length.OnExceed != "reject" {
		t.Errorf("defaults not filled: %+v", c)
	}
	cases := []struct{ name, yaml, want string }{
		{"no pools", `routes: []`, "no pools"},
		{"unknown field", ok + "\nbogus: 1", "unknown field"},
		{"bad url", `pools: [{name: p, replicas: [{url: "ftp://x"}]}]`, "absolute http(s) URL"},
		{"unknown pool", `pools: [{name: p, replicas: [{url: "http://h"}]}]
routes: [{model: a, pool: q}]`, `unknown pool "q"`},
		{"bad balancer", `pools: [{name: p, balancer: random, replicas: [{url: "http://h"}]}]`, "unknown balancer"},
		{"shared without redis", `pools: [{name: p, replicas: [{url: "http://h"}], queue: {concurrency: 4, shared: true}}]`, "queue.shared needs redis"},
		{"shared without a limit", `pools: [{name: p, replicas: [{url: "http://h"}], queue: {shared: true}}]
redis: {url: "redis://h:6379"}`, "queue.shared needs queue.concurrency"},
		{"shared adaptive", `pools: [{name: p, replicas: [{url: "http://h"}], queue: {concurrency: 4, adaptive: gradient, shared: true}}]
redis: {url: "redis://h:6379"}`, "queue.shared needs a fixed limit"},
		{"redis url and env", `pools: [{name: p, replicas: [{url: "http://h"}]}]
redis: {url: "redis://h:6379", url_env: X}`, "url or url_env, not both"},
		{"redis no url", `pools: [{name: p, replicas: [{url: "http://h"}]}]
redis: {timeout: 1s}`, "redis: needs url or url_env"},
		{"redis bad scheme", `pools: [{name: p, replicas: [{url: "http://h"}]}]
redis: {url: "http://user:pw-secret@h:6379"}`, "must be a redis://"},
		{"redis on_error", `pools: [{name: p, replicas: [{url: "http://h"}]}]
redis: {url: "redis://h:6379", on_error: ignore}`, "fail_open or fail_closed"},
		{"load factor below 1", `pools: [{name: p, balancer: prefix_bounded_load, load_factor: 0.9, replicas: [{url: "http://h"}]}]`, "load_factor 0.9 must be at least 1"},
		{"load factor of another balancer", `pools: [{name: p, balancer: prefix_affinity, load_factor: 1.5, replicas: [{url: "http://h"}]}]`, "prefix_bounded_load's setting"},
		{"bad duration", `pools: [{name: p, replicas: [{url: "http://h"}]}]
routes: [{model: a, pool: p, timeouts: {ttft: soon}}]`, "duration"},
		{"bad key hash", `pools: [{name: p, replicas: [{url: "http://h"}]}]
keys: [{name: k, sha256: abc}]`, "64 hex digits"},
		{"fallback loop", `pools: [{name: p, replicas: [{url: "http://h"}]}]
routes: [{model: a, pool: p, fallback: a}]`, "falls back to itself"},
		{"unknown fallback", `pools: [{name: p, replicas: [{url: "http://h"}]}]
routes: [{model: a, pool: p, fallback: b}]`, "neither a route"},
		{"aimd without concurrency", `pools: [{name: p, replicas: [{url: "http://h"}], queue: {aimd: true}}]`, "needs queue.concurrency"},
		{"default over max", `pools: [{name: p, replicas: [{url: "http://h"}]}]
routes: [{model: a, pool: p, length: {default_max_tokens: 10, max_max_tokens: 5}}]`, "exceeds max_max_tokens"},
		{"bad on_exceed", `pools: [{name: p, replicas: [{url: "http://h"}]}]
routes: [{model: a, pool: p, length: {on_exceed: truncate}}]`, "reject or clamp"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(c.yaml))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
	if _, err := ParseConfig([]byte(`pools: [{name: p, replicas: [{url: "http://h"}]}]
redis: {url: "http://user:pw-secret@h:6379"}`)); err == nil || strings.Contains(err.Error(), "pw-secret") {
		t.Errorf("a bad redis url's password is quoted: %v", err)
	}
	if _, err := QuickConfig([]string{"not a url"}); err == nil {
		t.Error("QuickConfig accepted a bad URL")
	}
}

// lockedBuffer is a log sink safe for the watcher goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// replaceFile replaces the file at path with text atomically: a loaded
// machine can stall a plain write between truncating and writing for
// longer than two polls of Watch.
func replaceFile(t testing.TB, path, text string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestHotReloadAppliesValidAndKeepsOldOnInvalid(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a"})
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	write := func(s string) { replaceFile(t, path, s) }
	base := fmt.Sprintf("pools: [{name: p, replicas: [{url: %q}]}]\n", up.URL())
	write(base + "routes: [{model: one, pool: p}]\n")
	cfg, loaded, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gw := startGateway(t, g)
	var logs lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Watch(ctx, path, loaded, 5*time.Millisecond, g.SetConfig, slog.New(slog.NewTextHandler(&logs, nil)))

	status := func(model string) int { s, _, _ := do(t, gw.URL, chatBody(model, false, "x", ""), nil); return s }
	if status("two") != 404 {
		t.Fatal("route two exists before the reload")
	}
	write(base + "routes: [{model: one, pool: p}, {model: two, pool: p}]\n")
	waitFor(t, "route two after reload", func() bool { return status("two") == 200 })

	write(base + "routes: [{model: one, pool: nowhere}]\n") // invalid
	waitFor(t, "the invalid reload to be logged", func() bool { return strings.Contains(logs.String(), "keeping the running configuration") })
	if !strings.Contains(logs.String(), `unknown pool`) {
		t.Errorf("log does not say why: %s", logs.String())
	}
	if status("two") != 200 || status("one") != 200 {
		t.Error("an invalid reload changed the running configuration")
	}
}

func TestAPIKeysNeverLogged(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a", Status: 500})
	var logs lockedBuffer
	g := mustGateway(t, fmt.Sprintf(`pools: [{name: p, replicas: [{url: %q, api_key: sk-upstream-secret}]}]
routes: [{model: "*", pool: p}]`, up.URL()))
	g.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	gw := startGateway(t, g)
	s, hdr, body := do(t, gw.URL, chatBody("m", false, "x", ""), nil)
	if s != 500 {
		t.Fatalf("status %d", s)
	}
	if got := up.Headers()[0].Get("Authorization"); got != "Bearer sk-upstream-secret" {
		t.Errorf("upstream got Authorization %q", got)
	}
	for _, where := range []string{logs.String(), body, fmt.Sprint(hdr)} {
		if strings.Contains(where, "sk-upstream-secret") {
			t.Errorf("the upstream key leaked: %s", where)
		}
	}
}

func FuzzScanRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`), true)
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a b"},{"type":"image_url"}]}]}`), true)
	f.Add([]byte(`{"model":"m","prompt":["a b",[1,2,3]],"max_completion_tokens":3}`), false)
	f.Add([]byte(`{"model":"m","prompt":[[1,2],[3]]}`), false)
	f.Add([]byte(`{"model":`), true)
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		r, err := ScanRequest(body, chat, 64)
		if err != nil {
			return
		}
		if r.Model == "" || r.InputTokens() < 0 || r.MaxTokens < 0 {
			t.Fatalf("accepted %q as %+v", body, r)
		}
		out, err := rewriteFields(body, map[string]any{"max_tokens": 7})
		if err != nil {
			t.Fatalf("rewrite of an accepted body failed: %v", err)
		}
		r2, err := ScanRequest(out, chat, 64)
		if err != nil || r2.Model != r.Model || r2.InputTokens() != r.InputTokens() {
			t.Fatalf("rewrite changed the request: %+v → %+v (%v)", r, r2, err)
		}
	})
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("pools: [{name: p, replicas: [{url: \"http://h:1\"}]}]\nroutes: [{model: \"*\", pool: p}]\n"))
	f.Add([]byte("pools:\n  - name: a\n    balancer: prefix_affinity\n    queue: {concurrency: 2, aimd: true}\n    replicas: [{url: \"http://x\", kind: vllm}]\nroutes:\n  - model: m\n    length_pools: [{max_input_tokens: 10, pool: a}, {pool: a}]\n    timeouts: {ttft: 1s, retries: 2}\n"))
	f.Add([]byte("keys: [{name: k, sha256: 00}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		if len(c.Pools) == 0 {
			t.Fatal("accepted a config without pools")
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("validated config fails a second validation: %v", err)
		}
		g := &Gateway{}
		if err := g.SetConfig(c); err != nil {
			t.Fatalf("SetConfig of a valid config: %v", err)
		}
		g.Close()
	})
}

func TestScanRequestByHand(t *testing.T) {
	cases := []struct {
		name             string
		body             string
		chat             bool
		model            string
		stream, usage    bool
		maxTokens, input int
		field            string
		wantErr          string
	}{
		// CountChat rule: 1 role token per message + content tokens.
		// "You are terse." = You, are, terse, . = 4; "Hi!" = Hi, ! = 2 → 2 + 4 + 2 = 8.
		{name: "chat", chat: true, body: `{"model":"m","stream":true,"max_tokens":7,"stream_options":{"include_usage":true},"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Hi!"}]}`,
			model: "m", stream: true, usage: true, maxTokens: 7, field: "max_tokens", input: 8},
		{name: "escapes and parts", chat: true, body: `{"model":"m\u0041","messages":[{"role":"user","content":[{"type":"text","text":"a\nb"},{"type":"image_url","image_url":{"url":"x"}}]},{"role":"assistant","content":null}],"max_completion_tokens":3,"max_tokens":9}`,
			model: "mA", maxTokens: 3, field: "max_completion_tokens", input: 4},
		{name: "completion ids", body: `{"model":"m","prompt":[[1,2,3],"one two"]}`, model: "m", input: 5},
		{name: "malformed", chat: true, body: `{"model":"m","messages":[}`, wantErr: "not valid JSON"},
		{name: "bad escape", chat: true, body: `{"model":"m","messages":[{"role":"user","content":"\q"}]}`, wantErr: "bad escape"},
		{name: "trailing", chat: true, body: `{"model":"m","messages":[{"role":"user","content":"x"}]} x`, wantErr: "after the request"},
		{name: "no model", chat: true, body: `{"messages":[{"role":"user","content":"x"}]}`, wantErr: "'model'"},
		{name: "no messages", chat: true, body: `{"model":"m","messages":[]}`, wantErr: "non-empty"},
		{name: "no prompt", body: `{"model":"m"}`, wantErr: "'prompt'"},
		{name: "negative", chat: true, body: `{"model":"m","max_tokens":-1,"messages":[{"role":"user","content":"x"}]}`, wantErr: "must be positive"},
		{name: "fraction", chat: true, body: `{"model":"m","max_tokens":1.5,"messages":[{"role":"user","content":"x"}]}`, wantErr: "integer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := ScanRequest([]byte(c.body), c.chat, 512)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := []any{r.Model, r.Stream, r.IncludeUsage, r.MaxTokens, r.MaxTokensField, r.InputTokens()}
			want := []any{c.model, c.stream, c.usage, c.maxTokens, c.field, c.input}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestRewriteFieldsKeepsOtherBytes(t *testing.T) {
	body := `{"model": "a", "messages":[{"role":"user","content":"x"}], "temperature": 0.5}`
	out, err := rewriteFields([]byte(body), map[string]any{"model": "b", "max_tokens": 12})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model": "b", "messages":[{"role":"user","content":"x"}], "temperature": 0.5,"max_tokens":12}`
	if string(out) != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
	out, err = rewriteFields([]byte(`{}`), map[string]any{"a": 1, "b": 2})
	if err != nil || string(out) != `{"a":1,"b":2}` {
		t.Errorf("empty object: %s %v", out, err)
	}
}

// FuzzScanRequestAgainstEncodingJSON checks the scanner against
// encoding/json and serve's decoder both ways: whatever it accepts is
// valid JSON that encoding/json reads with the same fields, and whatever
// it refuses, openai.DecodeChat refuses too.
func FuzzScanRequestAgainstEncodingJSON(f *testing.F) {
	f.Add([]byte(`{"model":"m","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hi \"there\"\n"}]}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a b"}]}],"max_tokens":null}`))
	f.Add([]byte(`{"model":"m","MODEL":"n","messages":[{"role":"user","Content":"hi","content":"x"}]}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","TEXT":"a","text":"b"}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ScanRequest(body, true, 64)
		if err != nil {
			// The scanner refuses only what a server refuses: a body that
			// serve's decoder (openai.DecodeChat: exact, unique keys,
			// validated fields) accepts is accepted here too.
			if _, apiErr := openai.DecodeChat(body); apiErr == nil {
				t.Fatalf("refused %q (%v), which openai.DecodeChat accepts", body, err)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		// encoding/json matches keys case-insensitively; the scanner
		// refuses a case variant of every key it reads, so whatever it
		// accepted has none, and encoding/json reads the same fields.
		if k := caseVariant(body); k != "" {
			t.Fatalf("accepted the case variant %q of a key it reads: %q", k, body)
		}
		var ref struct {
			Model    string `json:"model"`
			Stream   bool   `json:"stream"`
			Messages []struct {
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(body, &ref); err != nil {
			t.Fatalf("accepted %q, which encoding/json cannot read: %v", body, err)
		}
		if ref.Model != r.Model || ref.Stream != r.Stream {
			t.Fatalf("scanner %q/%v, encoding/json %q/%v", r.Model, r.Stream, ref.Model, ref.Stream)
		}
		want := 0
		for _, m := range ref.Messages {
			want++
			var s string
			if json.Unmarshal(m.Content, &s) == nil {
				want += tokenizer.Count(s)
				continue
			}
			var parts []struct {
				Text string `json:"text"`
			}
			if json.Unmarshal(m.Content, &parts) == nil {
				for _, p := range parts {
					want += tokenizer.Count(p.Text)
				}
			}
		}
		if got := r.InputTokens(); got != want {
			t.Fatalf("input tokens %d, encoding/json + tokenizer %d, body %q", got, want, body)
		}
	})
}

// caseVariant returns a key of body's top level, of a message, or of a
// content part that equals one of the keys the chat scan reads under
// Unicode case folding without being it ("" when there is none).
func caseVariant(body []byte) string {
	variant := func(obj json.RawMessage, known []string) string {
		var m map[string]json.RawMessage
		if json.Unmarshal(obj, &m) != nil {
			return ""
		}
		for k := range m {
			for _, want := range known {
				if k != want && strings.EqualFold(k, want) {
					return k
				}
			}
		}
		return ""
	}
	if k := variant(body, chatKeys); k != "" {
		return k
	}
	var top struct {
		Messages []json.RawMessage `json:"messages"`
	}
	_ = json.Unmarshal(body, &top)
	for _, m := range top.Messages {
		if k := variant(m, messageKeys); k != "" {
			return k
		}
		var msg struct {
			Content []json.RawMessage `json:"content"`
		}
		_ = json.Unmarshal(m, &msg)
		for _, part := range msg.Content {
			if k := variant(part, contentPartKeys); k != "" {
				return k
			}
		}
	}
	return ""
}

// inspectRaw classifies one raw event as the gateway reads it.
func inspectRaw(t testing.TB, p *chunkProbe, raw string) eventKind {
	t.Helper()
	ev, err := newEventReader(strings.NewReader(raw)).Next()
	if err != nil {
		t.Fatalf("%q: %v", raw, err)
	}
	return p.inspect(ev)
}

func TestInspectClassifiesEvents(t *testing.T) {
	cases := []struct {
		ev   string
		want eventKind
	}{
		{"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n", eventOther},
		{"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n", eventContent},
		{"data: {\"choices\": [{\"delta\": {\"content\": \"spaced\"}}]}\n\n", eventContent},
		{"data: {\"choices\":[{\"delta\":{\"content\":\"say \\\"text\\\":\\\"x\"}}]}\n\n", eventContent},
		{"data: {\"choices\":[{\"delta\":{\"content\":\"\\\"content\\\":\\\"x\"}}]}\n\n", eventContent},
		{"data: {\"choices\":[{\"text\":\"completion\"}]}\n\n", eventContent},
		{"data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hmm\"}}]}\n\n", eventContent},
		{"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0}]}}]}\n\n", eventContent},
		{"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n", eventOther},
		{"data: {\"choices\":[],\"usage\":{\"completion_tokens\":3}}\n\n", eventOther},
		{"data: {\"error\":{\"message\":\"boom\"}}\n\n", eventError},
		{"data: [DONE]\n\n", eventDone},
		{": keep-alive\n\n", eventNoData},
	}
	var p chunkProbe
	for _, c := range cases {
		if got := inspectRaw(t, &p, c.ev); got != c.want {
			t.Errorf("%q: kind %d, want %d", c.ev, got, c.want)
		}
	}
}

// TestInspectUsageAsDecoded: whatever path inspect takes, the kind and the
// usage it reads are those a full decode of the chunk gives.
func TestInspectUsageAsDecoded(t *testing.T) {
	for _, ev := range []string{
		`{"choices":[{"index":0,"delta":{"content":"tok"}}],"usage":null}`,
		`{"choices":[{"index":0,"delta":{"content":"tok"}}],"usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19}}`,
		`{"usage":{"prompt_tokens":1,"completion_tokens":30,"total_tokens":31,"completion_tokens_details":{"reasoning_tokens":2}},"choices":[{"index":0,"text":"x"}]}`,
		`{"choices":[{"index":0,"delta":{"content":"tok"}}],"usage":{"prompt_tokens":12,"completion_tokens":0,"total_tokens":12}}`,
		`{"choices":[{"index":0,"delta":{"content":"usage"}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"\"usage\":{\"completion_tokens\":9}"}}],"usage":null}`,
		`{"choices":[{"index":0,"delta":{"content":"tok"}}], "usage" : {"completion_tokens": 4}}`,
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}],"usage":{"completion_tokens":0}}`,
	} {
		var p chunkProbe
		kind := inspectRaw(t, &p, "data: "+ev+"\n\n")
		var want struct {
			Choices []struct {
				Delta *struct {
					Content string `json:"content"`
				} `json:"delta"`
				Text string `json:"text"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(ev), &want); err != nil {
			t.Fatalf("%s: %v", ev, err)
		}
		wantKind := eventOther
		for _, c := range want.Choices {
			if c.Text != "" || (c.Delta != nil && c.Delta.Content != "") {
				wantKind = eventContent
			}
		}
		if kind != wantKind {
			t.Errorf("%s: kind %d, want %d", ev, kind, wantKind)
		}
		used, ok := p.usage()
		if (want.Usage != nil) != ok || want.Usage != nil && want.Usage.CompletionTokens != used {
			t.Errorf("%s: usage %d %v, decoded %+v", ev, used, ok, want.Usage)
		}
	}
}

// TestNextEventReady: after an event, the reader tells whether the next
// one is already buffered (the flush waits for it, nothing else).
func TestNextEventReady(t *testing.T) {
	for _, c := range []struct {
		buffered string
		want     bool
	}{{"", false}, {"data: {\"a\":1}\n", false}, {"data: {\"a\":1}\n\n", true}, {"data: x\r\n\r\n", true}, {"data: x\n\ndata: partial", true}, {"data: x\r\rdata: y", true}} {
		rd := newEventReader(strings.NewReader("data: first\n\n" + c.buffered))
		if _, err := rd.Next(); err != nil {
			t.Fatal(err)
		}
		if got := rd.Ready(); got != c.want {
			t.Errorf("%q: %v, want %v", c.buffered, got, c.want)
		}
	}
}

// TestReloadUnderTraffic reloads the configuration while requests run; the
// race detector checks the shared state.
func TestReloadUnderTraffic(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a", Chunks: 3, Gap: time.Millisecond})
	mk := func(conc int) *Config {
		c, err := ParseConfig([]byte(fmt.Sprintf("pools: [{name: p, scrape_interval: 5ms, replicas: [{url: %q}], queue: {concurrency: %d, aimd: true}}]\nroutes: [{model: \"*\", pool: p}]\n", up.URL(), conc)))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	g, err := New(mk(4))
	if err != nil {
		t.Fatal(err)
	}
	gw := startGateway(t, g)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if s, _, b := do(t, gw.URL, chatBody("m", true, "x", ""), nil); s != 200 {
					t.Errorf("%d %s", s, b)
				}
			}
		}()
	}
	for i := range 20 {
		if err := g.SetConfig(mk(2 + i%3)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	wg.Wait()
	if d, f, _ := poolState(g, "p"); d != 0 || f != 0 {
		t.Errorf("after the traffic: depth %d in flight %d, want 0 0", d, f)
	}
}

// TestDocsExampleConfigIsValid keeps docs/gateway.md's example honest.
func TestDocsExampleConfigIsValid(t *testing.T) {
	doc, err := os.ReadFile("../../docs/gateway.md")
	if err != nil {
		t.Skip("docs/gateway.md not found:", err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n")
	if !ok {
		t.Fatal("no yaml block in docs/gateway.md")
	}
	block, _, _ := strings.Cut(rest, "```")
	block = strings.ReplaceAll(block, "<tokentrace gateway hash-key KEY>", HashKey("KEY"))
	t.Setenv("UPSTREAM_KEY", "secret")
	t.Setenv("TOKENTRACE_REDIS_URL", "redis://127.0.0.1:6379/0")
	if _, err := ParseConfig([]byte(block)); err != nil {
		t.Fatalf("the documented example is invalid: %v", err)
	}
}

func TestCompletionTokens(t *testing.T) {
	for body, want := range map[string]int{
		`{"choices":[{"message":{"content":"say \"completion_tokens\":99"}}],"usage":{"prompt_tokens":3,"completion_tokens":17,"total_tokens":20}}`: 17,
		`{"usage":{"completion_tokens": 5}}`: 5,
		`{"choices":[]}`:                     0,
	} {
		if got, err := answerTokens([]byte(body), &openai.ChunkInfo{}); got != want || err != nil {
			t.Errorf("%s: %d %v, want %d", body, got, err, want)
		}
	}
	for _, body := range []string{"<html>502 Bad Gateway</html>", `{"usage":{"completion_tokens":5}`, "", "[1]"} {
		if _, err := answerTokens([]byte(body), &openai.ChunkInfo{}); err == nil {
			t.Errorf("%q: no error, want one (not a JSON object)", body)
		}
	}
}

// TestScrapeFailureLoggedOnce: a replica whose /metrics fails is reported
// at warn once, not once per scrape, and the logger is in place before the
// first scrape (the race detector checks it).
func TestScrapeFailureLoggedOnce(t *testing.T) {
	var scrapes atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scrapes.Add(1)
		http.Error(w, "no metrics here", http.StatusInternalServerError)
	}))
	defer up.Close()
	cfg, err := ParseConfig([]byte(fmt.Sprintf("pools: [{name: p, scrape_interval: 2ms, replicas: [{url: %q}]}]\nroutes: [{model: \"*\", pool: p}]\n", up.URL)))
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	g, err := newWithLog(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	waitFor(t, "five scrapes", func() bool { return scrapes.Load() >= 5 })
	if n := strings.Count(logs.String(), "scrape failing"); n != 1 || !strings.Contains(logs.String(), "status 500") {
		t.Errorf("%d warnings for one failing replica, want 1 saying why: %s", n, logs.String())
	}
}

// TestModelsLogsReplicaLeftOut: a replica whose /v1/models fails is left
// out of the list, and the log says which and why.
func TestModelsLogsReplicaLeftOut(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	}))
	defer up.Close()
	g := mustGateway(t, fmt.Sprintf("pools: [{name: p, replicas: [{url: %q, models: [listed]}]}]\nroutes: [{model: \"*\", pool: p}]\n", up.URL))
	var logs lockedBuffer
	g.Log = slog.New(slog.NewTextHandler(&logs, nil))
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/models", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"listed"`) {
		t.Fatalf("status %d body %s", rec.Code, rec.Body.String())
	}
	if l := logs.String(); !strings.Contains(l, "left out") || !strings.Contains(l, up.URL) || !strings.Contains(l, "status 503") {
		t.Errorf("log does not say which replica was left out and why: %s", l)
	}
}

// TestInspectFlagsWhatIsNotJSON: a data payload that is neither [DONE]
// nor a JSON object is a protocol error; comments, other SSE fields and
// JSON objects of unexpected shape are not.
func TestInspectFlagsWhatIsNotJSON(t *testing.T) {
	for ev, want := range map[string]eventKind{
		"data: hello\n\n":  eventInvalid,
		"data: <html>\n\n": eventInvalid,
		"data: 42\n\n":     eventInvalid,
		"data: null\n\n":   eventInvalid,
		"data: [1]\n\n":    eventInvalid,
		"data:\n\n":        eventInvalid,
		`data: {"choices":[{"delta":{"content":"x"` + "\n\n": eventInvalid,
		`data: x {"content":"looks like content"}` + "\n\n":  eventInvalid,
		`data: {"choices":"not a list"}` + "\n\n":            eventOther,
		"event: ping\ndata: {}\n\n":                          eventOther,
		": keep-alive\n\n":                                   eventNoData,
		"id: 7\nretry: 100\n\n":                              eventNoData,
		"data:[DONE]\r\n\r\n":                                eventDone,
	} {
		var p chunkProbe
		if got := inspectRaw(t, &p, ev); got != want {
			t.Errorf("%q: kind %d, want %d", ev, got, want)
		}
	}
}

// Validate only checks: it fills no default and changes no value, and a
// configuration that passed SetDefaults and Validate passes both again
// unchanged.
func TestValidateChangesNothing(t *testing.T) {
	t.Setenv("UP_KEY", "sk-from-env")
	raw := &Config{
		Pools: []PoolConfig{{Name: "p", Balancer: "queue_aware", Queue: QueueConfig{Concurrency: 4, Adaptive: AdaptiveGradient},
			Replicas: []ReplicaConfig{{URL: "http://u:pw@h:1/", APIKeyEnv: "UP_KEY"}}}},
		Routes: []RouteConfig{{Model: "*", Pool: "p"}},
		Keys:   []KeyConfig{{Name: "k", SHA256: strings.ToUpper(HashKey("x"))}},
	}
	before := fmt.Sprintf("%+v", *raw)
	if err := raw.Validate(); err != nil {
		t.Fatal(err)
	}
	if after := fmt.Sprintf("%+v", *raw); after != before {
		t.Errorf("Validate changed the configuration:\n%s\n%s", before, after)
	}
	raw.SetDefaults()
	p := raw.Pools[0]
	if p.ScrapeInterval.D() != time.Second || p.Queue.MaxSize != 1024 || p.Queue.MinConcurrency != 1 || p.Queue.MaxConcurrency != 16 ||
		p.Replicas[0].URL != "http://h:1" || p.Replicas[0].APIKey != "sk-from-env" || raw.Keys[0].SHA256 != HashKey("x") ||
		raw.Routes[0].Length.OnExceed != "reject" || raw.Server.MaxBodyBytes != 4<<20 || raw.Server.PrefixBytes != 512 {
		t.Errorf("defaults not filled: %+v", raw)
	}
	once := fmt.Sprintf("%+v", *raw)
	raw.SetDefaults()
	if err := raw.Validate(); err != nil || fmt.Sprintf("%+v", *raw) != once {
		t.Errorf("SetDefaults twice: %v\n%s\n%+v", err, once, *raw)
	}
	if raw.Pools[0].Replicas[0].authorization() != "Bearer sk-from-env" {
		t.Errorf("authorization %q", raw.Pools[0].Replicas[0].authorization())
	}
}
