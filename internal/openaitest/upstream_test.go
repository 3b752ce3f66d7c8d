package openaitest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	oai "github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/tokentrace/tokentrace/internal/sse"
)

func client(u *Upstream) *oai.Client {
	c := oai.NewClient(option.WithBaseURL(u.URL()+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	return &c
}

var msgs = []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}

// TestStreamReadByOpenAIGo: the official client reads the generated
// stream: every chunk's content, the finish reason, the final usage.
func TestStreamReadByOpenAIGo(t *testing.T) {
	u := Start(t, &Upstream{Name: "a", Words: []string{"one", " two", " three"}, UsageChunk: true, PromptTokens: 7})
	c := client(u)
	stream := c.Chat.Completions.NewStreaming(context.Background(), oai.ChatCompletionNewParams{Model: "m", Messages: msgs})
	var acc oai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if got := acc.Choices[0].Message.Content; got != "one two three" {
		t.Errorf("content %q", got)
	}
	if acc.Choices[0].FinishReason != "stop" {
		t.Errorf("finish %q", acc.Choices[0].FinishReason)
	}
	if acc.Usage.PromptTokens != 7 || acc.Usage.CompletionTokens != 3 || acc.Usage.TotalTokens != 10 {
		t.Errorf("usage %+v", acc.Usage)
	}
	if u.Served.Load() != 1 || u.LastBody()["model"] != "m" || u.Headers()[0].Get("Authorization") != "Bearer unused" {
		t.Errorf("served %d, body %v, headers %v", u.Served.Load(), u.LastBody(), u.Headers())
	}
}

// TestWholeAnswerAndError: a request that does not stream gets one body
// with its Server-Timing header; Status answers with the OpenAI error
// shape the client parses.
func TestWholeAnswerAndError(t *testing.T) {
	u := Start(t, &Upstream{Name: "b", Chunks: 4, Timing: Timing})
	var hdr *http.Response
	r, err := client(u).Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{Model: "m", Messages: msgs}, option.WithResponseInto(&hdr))
	if err != nil {
		t.Fatal(err)
	}
	if r.Choices[0].Message.Content != "hello from b" || r.Usage.CompletionTokens != 4 || hdr.Header.Get("Server-Timing") != Timing {
		t.Errorf("answer %+v, Server-Timing %q", r, hdr.Header.Get("Server-Timing"))
	}
	bad := Start(t, &Upstream{Name: "c", Status: http.StatusServiceUnavailable})
	_, err = client(bad).Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{Model: "m", Messages: msgs})
	var apiErr *oai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 503 || !strings.Contains(apiErr.Message, "fake upstream c failing") {
		t.Errorf("error %v, want 503 naming the upstream", err)
	}
}

// post streams one chat request and returns its response.
func post(t *testing.T, ctx context.Context, u *Upstream) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u.URL()+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[],"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// events reads a stream's events: data payloads, and comments as ": …".
func events(t *testing.T, r io.Reader) []string {
	t.Helper()
	rd := sse.NewReader(r, nil, 1<<20)
	rd.Blocks()
	var out []string
	for {
		ev, err := rd.Next()
		if err != nil {
			return out
		}
		if ev.HasData {
			out = append(out, string(ev.Data))
		} else {
			out = append(out, strings.TrimSpace(string(ev.Raw)))
		}
	}
}

// TestStreamShapes: the gate releases chunks one by one, continuous
// usage counts them, a cut ends the stream before [DONE], and the timing
// comes as a trailer.
func TestStreamShapes(t *testing.T) {
	gate := make(chan struct{})
	u := Start(t, &Upstream{Chunks: 2, Gate: gate, ContinuousUsage: true, Timing: Timing})
	resp := post(t, context.Background(), u)
	go func() { gate <- struct{}{}; gate <- struct{}{} }()
	got := events(t, resp.Body)
	want := []string{
		`{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
		`{"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"t0 "}}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`,
		`{"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"t1 "}}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`,
		`{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
		`[DONE]`,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
	if tr := resp.Trailer.Get("Server-Timing"); tr != Timing {
		t.Errorf("trailer %q, want %q", tr, Timing)
	}

	cut := Start(t, &Upstream{Chunks: 3, CutAfter: 1})
	got = events(t, post(t, context.Background(), cut).Body)
	if len(got) != 2 || got[len(got)-1] == "[DONE]" {
		t.Errorf("cut stream: %q, want the role chunk and one content chunk", got)
	}
}

// TestHoldCountsTheClientsClose: a held connection sends keep-alives
// until the client goes; Gone and Closed say so.
func TestHoldCountsTheClientsClose(t *testing.T) {
	gone := make(chan struct{}, 1)
	u := Start(t, &Upstream{Script: "data: {}\n\n", Hold: true, KeepAlive: time.Millisecond, Gone: gone})
	ctx, cancel := context.WithCancel(context.Background())
	resp := post(t, ctx, u)
	rd := sse.NewReader(resp.Body, nil, 1<<10)
	rd.Blocks()
	var seen []string
	for len(seen) < 3 {
		ev, err := rd.Next()
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, strings.TrimSpace(string(ev.Raw)))
	}
	if d := cmp.Diff([]string{"data: {}", ": keep-alive", ": keep-alive"}, seen); d != "" {
		t.Errorf("held stream (-want +got):\n%s", d)
	}
	cancel()
	select {
	case <-gone:
	case <-time.After(30 * time.Second):
		t.Fatal("the client's close was not noticed")
	}
	if u.Closed.Load() != 1 {
		t.Errorf("closed %d, want 1", u.Closed.Load())
	}
}

// TestEndlessStopsAtTheClientsClose: an endless answer is cut by the
// client, and counted.
func TestEndlessStopsAtTheClientsClose(t *testing.T) {
	u := Start(t, &Upstream{Endless: 1 << 30})
	resp := post(t, context.Background(), u)
	if _, err := io.ReadFull(resp.Body, make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	deadline := time.Now().Add(30 * time.Second)
	for u.Closed.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if u.Closed.Load() != 1 {
		t.Error("the client's close was not counted")
	}
}

// TestTimingPlacement: a generated stream's Server-Timing goes in the
// trailer by default, in the header with TimingIn "header", and in the
// comment before [DONE] with TimingIn "final".
func TestTimingPlacement(t *testing.T) {
	for _, in := range []string{"", "header", "final"} {
		u := Start(t, &Upstream{Name: "t", Chunks: 1, Timing: Timing, TimingIn: in})
		resp, err := http.Post(u.URL()+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{"header": resp.Header.Get("Server-Timing") == Timing, "trailer": resp.Trailer.Get("Server-Timing") == Timing,
			"final": strings.HasSuffix(string(body), ": server-timing "+Timing+"\ndata: [DONE]\n\n")}
		want := map[string]bool{"header": in == "header", "trailer": in == "", "final": in == "final"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("TimingIn %q: where Server-Timing went (-want +got):\n%s", in, diff)
		}
	}
}
