package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	aopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	oai "github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
	"github.com/openai/openai-go/responses"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/serve"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// chatPath is the chat completions path the tests post to.
const chatPath = "/v1/chat/completions"

// apiOf is chat completions or completions, as the older tests name them.
func apiOf(chat bool) openai.API {
	if chat {
		return openai.APIChat
	}
	return openai.APICompletions
}

// TestScanRequestAPIs reads each API's own fields: the model, the stream
// flag (Ollama's true when absent), the output cap (max_output_tokens,
// max_tokens, options.num_predict) and the prompt's size, and refuses a
// case variant of a key it reads. The prompt's size is the tokenizer's
// chat rule, as serve counts it: instructions and system are a system
// message ("be brief" and "a b": 1 + 2 and 1 + 2 tokens, 6).
func TestScanRequestAPIs(t *testing.T) {
	cases := []struct {
		api       openai.API
		body      string
		stream    bool
		maxTokens int
		field     string
		input     int
		wantErr   string
	}{
		// Another API's fields are not this one's: read as such, options.num_predict 1 in a chat body passed a
		// route's max_max_tokens while serve generated to its default.
		{api: openai.APIChat, body: `{"model":"m","messages":[{"role":"user","content":"a"}],"options":{"num_predict":1},"max_output_tokens":2,"input":"b c d"}`, input: 2},
		{api: openai.APIResponses, body: `{"model":"m","input":"a","max_tokens":3,"messages":[{"role":"user","content":"b c"}],"stream_options":{"include_usage":true}}`, input: 2},
		{api: openai.APIResponses, body: `{"model":"m","input":"a b c","max_output_tokens":9,"stream":true}`, stream: true, maxTokens: 9, field: "max_output_tokens", input: 4},
		{api: openai.APIResponses, body: `{"model":"m","instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"a b"}]}]}`, input: 6},
		{api: openai.APIResponses, body: `{"model":"m","input":[]}`, wantErr: "'input'"},
		{api: openai.APIResponses, body: `{"model":"m","input":"x","MAX_OUTPUT_TOKENS":3}`, wantErr: "Unrecognized request argument"},
		{api: openai.APIMessages, body: `{"model":"m","max_tokens":5,"system":"be brief","messages":[{"role":"user","content":[{"type":"text","text":"a b"}]}],"stream":true}`, stream: true, maxTokens: 5, field: "max_tokens", input: 6},
		{api: openai.APIMessages, body: `{"model":"m","max_tokens":5,"max_tokens":6,"messages":[{"role":"user","content":"x"}]}`, wantErr: "duplicate key"},
		{api: openai.APIOllama, body: `{"model":"m","messages":[{"role":"user","content":"a b"}],"options":{"num_predict":7,"temperature":0}}`, stream: true, maxTokens: 7, field: "options.num_predict", input: 3},
		{api: openai.APIOllama, body: `{"model":"m","stream":false,"messages":[{"role":"user","content":"a"}],"options":{"num_predict":-1}}`, field: "options.num_predict", input: 2},
		{api: openai.APIOllama, body: `{"model":"m","messages":[{"role":"user","content":"a"}],"options":{"Num_Predict":5}}`, wantErr: "Unrecognized request argument"},
	}
	for _, c := range cases {
		r, err := ScanRequest([]byte(c.body), c.api, 512)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s %s: error %v, want %q", c.api, c.body, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s %s: %v", c.api, c.body, err)
			continue
		}
		if r.Model != "m" || r.Stream != c.stream || r.MaxTokens != c.maxTokens || r.InputTokens() != c.input ||
			(c.field != "" && r.MaxTokensField != c.field) {
			t.Errorf("%s %s: %+v (input %d), want stream %v, max %d in %q, input %d", c.api, c.body, r, r.InputTokens(), c.stream, c.maxTokens, c.field, c.input)
		}
	}
	// A policy's cap on Ollama's output goes into its options object.
	out, err := rewriteFields([]byte(`{"model":"m","messages":[{"role":"user","content":"a"}],"options":{"temperature":0}}`), map[string]any{ollamaNumPredict: 4})
	if err != nil || !strings.Contains(string(out), `"options": {"num_predict":4,"temperature":0}`) {
		t.Errorf("rewrite: %s %v", out, err)
	}
}

// startReasoningServe runs serve with a reasoning phase of think tokens.
func startReasoningServe(t *testing.T, think int) *serve.Server {
	t.Helper()
	s, err := serve.Start(context.Background(), serve.Config{Engine: engine.Config{
		Model:       simModel,
		StepTimer:   engine.StepTimerFunc(func(*perfmodel.Batch) time.Duration { return time.Millisecond }),
		BlockSize:   16,
		NumBlocks:   512,
		MaxModelLen: 4096,
		MaxNumSeqs:  64,
		Seed:        1,
		Reasoning:   workload.Fixed(think),
	}}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestAPIClientsThroughGatewayToServe drives the gateway in front of
// serve with openai-go's Responses client and the Anthropic Go SDK,
// streamed and whole, and Ollama's NDJSON chat: each answer arrives as
// serve wrote it, the final Server-Timing comment shares the typed
// APIs' end event, and a path under /v1/ the gateway does not read is
// passed through (or refused, when the configuration says so).
func TestAPIClientsThroughGatewayToServe(t *testing.T) {
	s := startReasoningServe(t, 2)
	cfg := `
pools: [{name: sim, replicas: [{url: %q}]}]
routes: [{model: %s, pool: sim}]
`
	g := mustGateway(t, fmt.Sprintf(cfg, serveBase(s), simModel))
	gw := startGateway(t, g)
	ctx := context.Background()

	oc := oai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	params := responses.ResponseNewParams{Model: simModel, Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("Hi!")},
		MaxOutputTokens: oai.Int(6)}
	r, err := oc.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if tokenizer.Count(r.OutputText()) != 4 || r.Usage.OutputTokensDetails.ReasoningTokens != 2 {
		t.Errorf("whole response: text %q, usage %+v", r.OutputText(), r.Usage)
	}
	stream := oc.Responses.NewStreaming(ctx, params)
	text := ""
	for stream.Next() {
		if ev := stream.Current(); ev.Type == "response.output_text.delta" {
			text += ev.Delta.OfString
		}
	}
	if err := stream.Err(); err != nil || tokenizer.Count(text) != 4 {
		t.Errorf("streamed response: text %q, %v", text, err)
	}

	ac := anthropic.NewClient(aopt.WithBaseURL(gw.URL+"/"), aopt.WithAPIKey("unused"), aopt.WithMaxRetries(0))
	mp := anthropic.MessageNewParams{Model: simModel, MaxTokens: 6, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hi!"))}}
	ms := ac.Messages.NewStreaming(ctx, mp)
	var m anthropic.Message
	for ms.Next() {
		if err := m.Accumulate(ms.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := ms.Err(); err != nil || len(m.Content) != 2 || m.Content[0].Type != "thinking" || m.Usage.OutputTokens != 6 {
		t.Errorf("streamed message %+v, %v", m, err)
	}
	if _, err := ac.Messages.New(ctx, anthropic.MessageNewParams{Model: "nope", MaxTokens: 6, Messages: mp.Messages}); err == nil ||
		!strings.Contains(err.Error(), "not_found_error") {
		t.Errorf("unknown model through the gateway: %v", err)
	}

	// The raw streams: the final comment in the end event's block.
	for _, c := range []struct {
		api        openai.API
		body, last string
	}{
		{openai.APIResponses, `{"model":"sim-model","input":"x","stream":true}`, "\nevent: response.completed\n"},
		{openai.APIMessages, `{"model":"sim-model","max_tokens":5,"messages":[{"role":"user","content":"x"}],"stream":true}`, "\nevent: message_stop\n"},
		{openai.APIOllama, `{"model":"sim-model","messages":[{"role":"user","content":"x"}]}`, `"done":true`},
	} {
		resp := postJSON(t, gw.URL+c.api.Path(), c.body)
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		body := string(b)
		i := strings.LastIndex(body, ": "+latency.FinalTimingComment)
		switch {
		case resp.StatusCode != http.StatusOK || !strings.Contains(body, c.last):
			t.Errorf("%s: %d %s", c.api, resp.StatusCode, body)
		case c.api.NDJSON() && i >= 0:
			t.Errorf("%s: a comment in an NDJSON stream: %s", c.api, body)
		case !c.api.NDJSON() && (i < 0 || !strings.HasPrefix(body[strings.Index(body[i:], "\n")+i:], c.last)):
			t.Errorf("%s: the final comment does not precede the end event: %s", c.api, body)
		}
		if resp.Trailer.Get("Server-Timing") == "" {
			t.Errorf("%s: no Server-Timing trailer", c.api)
		}
	}

	// An unknown path under /v1/ reaches serve (its own 404), unless refused.
	resp := postJSON(t, gw.URL+"/v1/embeddings", `{"model":"sim-model","input":"x"}`)
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), "no route for POST /v1/embeddings") {
		t.Errorf("passed through: %d %s", resp.StatusCode, b)
	}
	g2 := mustGateway(t, fmt.Sprintf(cfg+"server: {unknown_paths: refuse}\n", serveBase(s), simModel))
	gw2 := startGateway(t, g2)
	resp = postJSON(t, gw2.URL+"/v1/embeddings", `{"model":"sim-model","input":"x"}`)
	b, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), "unknown path") {
		t.Errorf("refused: %d %s", resp.StatusCode, b)
	}
}

func postJSON(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestGatewaySplitsReasoningFromAnswer streams each API through the
// gateway from serve with a reasoning phase: every stream's first answer
// token is observed apart from its first token (the reasoning's), in
// tokentrace_gateway_time_to_first_answer_seconds and
// tokentrace_gateway_reasoning_seconds, whatever the API's events.
func TestGatewaySplitsReasoningFromAnswer(t *testing.T) {
	s := startReasoningServe(t, 5)
	g := mustGateway(t, fmt.Sprintf("pools: [{name: sim, replicas: [{url: %q}]}]\nroutes: [{model: %s, pool: sim}]\n", serveBase(s), simModel))
	gw := startGateway(t, g)
	bodies := map[openai.API]string{
		openai.APIChat:      `{"model":"sim-model","max_tokens":8,"messages":[{"role":"user","content":"x"}],"stream":true}`,
		openai.APIResponses: `{"model":"sim-model","max_output_tokens":8,"input":"x","stream":true}`,
		openai.APIMessages:  `{"model":"sim-model","max_tokens":8,"messages":[{"role":"user","content":"x"}],"stream":true}`,
		openai.APIOllama:    `{"model":"sim-model","options":{"num_predict":8},"messages":[{"role":"user","content":"x"}]}`,
	}
	for api, body := range bodies {
		resp := postJSON(t, gw.URL+api.Path(), body)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", api, resp.StatusCode)
		}
	}
	count := func(h *prometheus.HistogramVec) (n uint64, sum float64) {
		var m dto.Metric
		if err := h.WithLabelValues("sim", simModel).(prometheus.Histogram).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
	}
	if n, _ := count(g.Metrics.FirstAnswer); n != 4 {
		t.Errorf("first answer observed %d times, want 4", n)
	}
	if n, sum := count(g.Metrics.Reasoning); n != 4 || sum <= 0 {
		t.Errorf("reasoning observed %d times (sum %gs), want 4", n, sum)
	}
}

// TestHostileBodiesPerAPI sends each API's endpoint hostile bodies: deep
// nesting, a case variant of a key the gateway reads, a duplicated one,
// a body over server.max_body_bytes. Each is refused before any upstream
// with a 4xx in the API's own error shape.
func TestHostileBodiesPerAPI(t *testing.T) {
	g := mustGateway(t, "server: {max_body_bytes: 4096}\npools: [{name: p, replicas: [{url: \"http://127.0.0.1:1\"}]}]\nroutes: [{model: m, pool: p}]\n")
	gw := startGateway(t, g)
	deep := strings.Repeat("[", 200) + strings.Repeat("]", 200)
	for _, c := range []struct {
		api    openai.API
		body   string
		status int
	}{
		{openai.APIResponses, `{"model":"m","input":` + deep + `}`, 400},
		{openai.APIResponses, `{"model":"m","input":"x","Stream":true}`, 400},
		{openai.APIResponses, `{"model":"m","input":"` + strings.Repeat("a", 5000) + `"}`, 413},
		{openai.APIMessages, `{"model":"m","max_tokens":1,"messages":` + deep + `}`, 400},
		{openai.APIMessages, `{"model":"m","max_tokens":1,"max_tokens":2,"messages":[{"role":"user","content":"x"}]}`, 400},
		{openai.APIMessages, `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"` + strings.Repeat("a", 5000) + `"}]}`, 413},
		{openai.APIOllama, `{"model":"m","messages":` + deep + `}`, 400},
		{openai.APIOllama, `{"model":"m","messages":[{"role":"user","content":"x"}],"options":{"num_predict":1,"num_predict":2}}`, 400},
		{openai.APIOllama, `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("a", 5000) + `"}]}`, 413},
	} {
		resp := postJSON(t, gw.URL+c.api.Path(), c.body)
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != c.status || apiErrorMessage(c.api, b) == "" {
			t.Errorf("%s %.50s: %d %s, want %d in the API's error shape", c.api, c.body, resp.StatusCode, b, c.status)
		}
	}
}

// apiErrorMessage is the message of an error body in api's shape (the
// Messages API's {"type":"error","error":{…}}, Ollama's {"error":"…"},
// OpenAI's {"error":{…}}); "" when b is not one.
func apiErrorMessage(api openai.API, b []byte) string {
	switch api {
	case openai.APIOllama:
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		return e.Error
	case openai.APIMessages:
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Type, Message string
			} `json:"error"`
		}
		if json.Unmarshal(b, &e) != nil || e.Type != "error" || e.Error.Type == "" {
			return ""
		}
		return e.Error.Message
	}
	var e struct {
		Error struct {
			Type, Message string
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	return e.Error.Message
}
