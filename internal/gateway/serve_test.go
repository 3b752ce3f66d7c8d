package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	oai "github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/serve"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
)

const simModel = "sim-model"

// startServe runs tokentrace serve in process with every engine step
// taking step, and returns its base URL (without /v1).
func startServe(t testing.TB, step time.Duration) *serve.Server {
	t.Helper()
	return startServeSeqs(t, step, 64)
}

// startServeSeqs is startServe with at most maxSeqs sequences per batch.
func startServeSeqs(t testing.TB, step time.Duration, maxSeqs int) *serve.Server {
	t.Helper()
	s, err := serve.Start(context.Background(), serve.Config{Engine: engine.Config{
		Model:       simModel,
		StepTimer:   engine.StepTimerFunc(func(*perfmodel.Batch) time.Duration { return step }),
		BlockSize:   16,
		NumBlocks:   512,
		MaxModelLen: 4096,
		MaxNumSeqs:  maxSeqs,
		Seed:        1,
	}}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func serveBase(s *serve.Server) string { return strings.TrimSuffix(s.URL(), "/v1") }

func TestOpenAIClientThroughGatewayToServe(t *testing.T) {
	s := startServe(t, time.Millisecond)
	g := mustGateway(t, fmt.Sprintf(`
pools: [{name: sim, replicas: [{url: %q, kind: tokentrace}]}]
routes: [{model: %s, pool: sim}, {model: public-alias, pool: sim, upstream_model: %s}]
keys: [{name: t, sha256: %s}]
`, serveBase(s), simModel, simModel, HashKey("sk-test")))
	gw := startGateway(t, g)
	client := oai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	ctx := context.Background()
	msgs := []oai.ChatCompletionMessageParamUnion{oai.SystemMessage("You are terse."), oai.UserMessage("Hi!")}

	c, err := client.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: simModel, Messages: msgs, MaxCompletionTokens: oai.Int(6)},
		option.WithJSONSet("ignore_eos", true))
	if err != nil {
		t.Fatal(err)
	}
	if c.Usage.CompletionTokens != 6 || c.Usage.PromptTokens != 8 {
		t.Errorf("usage %+v", c.Usage)
	}

	stream := client.Chat.Completions.NewStreaming(ctx, oai.ChatCompletionNewParams{
		Model: "public-alias", Messages: msgs, MaxTokens: oai.Int(9),
		StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)},
	}, option.WithJSONSet("ignore_eos", true))
	var acc oai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Usage.CompletionTokens != 9 || acc.Choices[0].Message.Content == "" {
		t.Errorf("streamed usage %+v content %q", acc.Usage, acc.Choices[0].Message.Content)
	}

	// Errors from the gateway reach the client as OpenAI errors.
	_, err = client.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "no-such-model", Messages: msgs})
	var apiErr *oai.Error
	if !errorsAs(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" {
		t.Errorf("unknown model: %v", err)
	}
	bad := oai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("sk-wrong"), option.WithMaxRetries(0))
	_, err = bad.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: simModel, Messages: msgs})
	if !errorsAs(err, &apiErr) || apiErr.StatusCode != 401 {
		t.Errorf("wrong key: %v", err)
	}

	// /v1/models merges the upstream's list with the routes' names.
	page, err := client.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, m := range page.Data {
		ids[m.ID] = true
	}
	if !ids[simModel] || !ids["public-alias"] {
		t.Errorf("models %v, want %s and public-alias", ids, simModel)
	}
}

func TestServeSplitFoldedAndDisconnectStopsEngine(t *testing.T) {
	s := startServe(t, 2*time.Millisecond)
	g := quickGateway(t, serveBase(s))
	gw := startGateway(t, g)

	// A complete stream: the serve Server-Timing trailer splits upstream TTFT.
	resp := post(t, context.Background(), gw.URL, chatBody(simModel, true, "hello there", `,"max_tokens":5,"ignore_eos":true`), nil)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	st := timingMap(resp.Trailer.Get("Server-Timing"))
	if _, ok := st[latency.TimingPrefill]; !ok {
		t.Fatalf("trailer %q lacks the server split", resp.Trailer.Get("Server-Timing"))
	}
	if st[latency.TimingPrefill] < 2*time.Millisecond {
		t.Errorf("prefill %v, want ≥ one 2 ms step", st[latency.TimingPrefill])
	}

	// A long stream, abandoned: the engine's running count drops to 0.
	ctx, cancel := context.WithCancel(context.Background())
	resp = post(t, ctx, gw.URL, chatBody(simModel, true, "go on", `,"max_tokens":3000,"ignore_eos":true`), nil)
	buf := make([]byte, 256)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	if n := s.Engine().Stats().Running; n != 1 {
		t.Fatalf("engine running = %d, want 1", n)
	}
	cancel()
	resp.Body.Close()
	waitFor(t, "engine to drop the abandoned request", func() bool { return s.Engine().Stats().Running == 0 })
	if r := g.rt.Load().pools["default"].replicas[0].Outstanding(); r != 0 {
		t.Errorf("gateway still counts %d outstanding", r)
	}
}

// TestStagesSumAgainstServe: TestStagesSumToClientE2E's checks against
// tokentrace serve, whose split must be folded.
func TestStagesSumAgainstServe(t *testing.T) {
	s := startServe(t, time.Millisecond)
	gw := startGateway(t, quickGateway(t, serveBase(s)))
	within, gaps := stagesBatch(t, gw.URL, 50, serveStagesBody, true)
	t.Logf("within 1 ms of the client's E2E on %d/50; worst gap %v", within, slices.Max(gaps))
}

func serveStagesBody(i int) string {
	return chatBody(simModel, true, fmt.Sprintf("request %d", i), `,"max_tokens":8,"ignore_eos":true`)
}

func errorsAs(err error, target **oai.Error) bool {
	if err == nil {
		return false
	}
	return errors.As(err, target)
}

func TestQueueAwarePoolScrapesServeMetrics(t *testing.T) {
	s := startServe(t, time.Millisecond)
	g := mustGateway(t, fmt.Sprintf(`
pools: [{name: sim, balancer: queue_aware, scrape_interval: 20ms, replicas: [{url: %q, kind: tokentrace}]}]
routes: [{model: "*", pool: sim}]
`, serveBase(s)))
	defer g.Close()
	rep := g.rt.Load().pools["sim"].replicas[0]
	waitFor(t, "a fresh scrape of serve's /metrics", func() bool {
		_, _, fresh := rep.load(time.Now(), time.Second)
		return fresh
	})
}

func TestStreamRequestAnsweredWithJSONIsPassedThrough(t *testing.T) {
	// An upstream that ignores "stream": true and answers one JSON body.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","choices":[{"message":{"content":"whole"}}]}`)
	}))
	defer up.Close()
	gw := startGateway(t, quickGateway(t, up.URL))
	st, _, body := do(t, gw.URL, chatBody("m", true, "x", ""), nil)
	if st != 200 || !strings.Contains(body, `"whole"`) {
		t.Fatalf("status %d body %s", st, body)
	}
}

func TestCompletionsStreamThroughGateway(t *testing.T) {
	s := startServe(t, time.Millisecond)
	gw := startGateway(t, quickGateway(t, serveBase(s)))
	body := fmt.Sprintf(`{"model":%q,"prompt":"one two three","max_tokens":4,"ignore_eos":true,"stream":true}`, simModel)
	resp, err := http.Post(gw.URL+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	data, comments := sseEvents(t, resp.Body)
	resp.Body.Close()
	// Count tokens, not events: a slow reader (the race detector) may get
	// two tokens merged into one chunk.
	tokens := 0
	for _, d := range data {
		var c struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(d), &c) == nil {
			for _, ch := range c.Choices {
				tokens += tokenizer.Count(ch.Text)
			}
		}
	}
	if resp.StatusCode != 200 || tokens != 4 || data[len(data)-1] != "[DONE]" || len(comments) != 1 {
		t.Fatalf("status %d, %d text tokens, last %q, comments %v", resp.StatusCode, tokens, data[len(data)-1], comments)
	}
}

// The gateway passes on serve's own stages after its own: a client reads
// both hops, each stage once, and decomposes the request exactly.
func TestServeStagesPassedOn(t *testing.T) {
	s := startServe(t, time.Millisecond)
	gw := startGateway(t, quickGateway(t, serveBase(s)))
	for _, stream := range []bool{true, false} {
		resp := post(t, context.Background(), gw.URL, chatBody(simModel, stream, "hello there", `,"max_tokens":4,"ignore_eos":true`), nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var final []string
		if i := strings.Index(string(b), ": "+latency.FinalTimingComment); i >= 0 {
			line := string(b[i+2:])
			final = []string{strings.TrimPrefix(line[:strings.IndexByte(line, '\n')], latency.FinalTimingComment)}
		}
		stages, notes := latency.ParseTiming(latency.TimingValues{Header: resp.Header.Values("Server-Timing"), Final: final,
			Trailer: resp.Trailer.Values("Server-Timing")})
		if len(notes) > 0 {
			t.Errorf("stream %v: notes %q", stream, notes)
		}
		got := map[string]bool{}
		for _, st := range stages {
			got[string(st.Hop)+"."+st.Name] = true
		}
		for _, want := range []string{"gateway.gateway_in", "gateway.upstream_ttft", "gateway.decode", "gateway.total",
			"server.frontend", "server.server_queue", "server.prefill", "server.server_decode"} {
			if !got[want] {
				t.Errorf("stream %v: %s missing from %v", stream, want, stages)
			}
		}
		if stream && final == nil {
			t.Errorf("no final server-timing comment")
		}
	}
}
