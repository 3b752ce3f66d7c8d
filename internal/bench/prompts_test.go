package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/tokenizer"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// wordCounter counts a prompt as overhead + per tokens a word.
type wordCounter struct {
	overhead, per, calls int
}

func (c *wordCounter) count(_ context.Context, req *workload.Request) (int, error) {
	c.calls++
	return c.overhead + c.per*len(strings.Fields(promptText(req))), nil
}

// Hand-computed sizing: 20 words of which 5 are a shared prefix (6 tokens
// with the chat role), counted as 27 + 1 per word, asked for 40 tokens:
// 13 words. At 2 tokens a word and 27 more, 40 is odd: cut to the 5
// prefix words (37), then 2 per word learnt, 7 words (41) — one token
// away, within SizeTolerance; 6 (39) is no closer. Asked for 30 at 1 a word
// but 27 of template: the shared prefix cannot be cut, the floor is said.
func TestSizePrompt(t *testing.T) {
	mk := func(want int) *workload.Request {
		words := strings.Fields(tokenizer.Filler(20, 7))
		return &workload.Request{Messages: []tokenizer.Message{{Role: "user", Content: strings.Join(words, " ")}},
			InputTokens: want, SharedPrefixTokens: 6, Filler: true, Session: 3}
	}
	prefix := strings.Join(strings.Fields(tokenizer.Filler(20, 7))[:5], " ")
	for _, tc := range []struct {
		name           string
		c              *wordCounter
		want, served   int
		words          int
		err            error
		maxCountsCalls int
	}{
		{"shorter", &wordCounter{overhead: 27, per: 1}, 40, 40, 13, nil, 2},
		{"longer", &wordCounter{overhead: 27, per: 1}, 80, 80, 53, nil, 2},
		{"two tokens a word", &wordCounter{overhead: 27, per: 2}, 40, 41, 7, nil, maxSizeCounts},
		{"below the template", &wordCounter{overhead: 27, per: 1}, 30, 32, 5, errPromptFloor, maxSizeCounts},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := mk(tc.want)
			err := sizePrompt(context.Background(), tc.c, req)
			if !errors.Is(err, tc.err) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			got := strings.Fields(req.Messages[0].Content)
			if req.Requested != tc.want || req.InputTokens != tc.served || len(got) != tc.words {
				t.Errorf("requested %d served %d words %d; want %d, %d, %d", req.Requested, req.InputTokens, len(got), tc.want, tc.served, tc.words)
			}
			if !strings.HasPrefix(req.Messages[0].Content, prefix) {
				t.Errorf("the shared prefix %q was not kept: %q", prefix, req.Messages[0].Content)
			}
			if tc.c.calls > tc.maxCountsCalls {
				t.Errorf("%d counts, want at most %d", tc.c.calls, tc.maxCountsCalls)
			}
		})
	}
	// A prompt that is not filler (a prompt file's, a later turn's) is
	// left alone.
	req := mk(40)
	req.Filler = false
	before := req.Messages[0].Content
	if err := sizePrompt(context.Background(), &wordCounter{overhead: 27, per: 1}, req); err != nil || req.Messages[0].Content != before || req.Requested != 0 {
		t.Errorf("a non-filler prompt was resized: %v %+v", err, req)
	}
}

// fakeVLLM answers vLLM's /tokenize (a count of 3 + one token a word,
// for messages or a prompt; keys exact) and a chat completion whose usage
// counts the prompt so; offerTokenize false: /tokenize is 404.
func fakeVLLM(t *testing.T, offerTokenize bool, countKey string) *httptest.Server {
	t.Helper()
	count := func(body map[string]json.RawMessage) (int, bool) {
		var msgs []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		}
		var prompt string
		switch {
		case body["messages"] != nil:
			if json.Unmarshal(body["messages"], &msgs) != nil {
				return 0, false
			}
		case body["prompt"] != nil:
			if json.Unmarshal(body["prompt"], &prompt) != nil {
				return 0, false
			}
			msgs = append(msgs, struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			}{"user", prompt})
		default:
			return 0, false
		}
		n := 3
		for _, m := range msgs {
			n += len(strings.Fields(m.Content))
		}
		return n, true
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]json.RawMessage
		b, _ := io.ReadAll(r.Body)
		if json.Unmarshal(b, &body) != nil {
			http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
			return
		}
		switch r.URL.Path {
		case "/tokenize":
			n, ok := count(body)
			if !offerTokenize {
				http.NotFound(w, r)
				return
			}
			if !ok || body["model"] == nil { // vLLM requires the model; llama.cpp's body has none
				http.Error(w, `{"error":{"message":"validation error"}}`, http.StatusBadRequest)
				return
			}
			fmt.Fprintf(w, `{%q:%d,"max_model_len":4096,"tokens":[]}`, countKey, n)
		case "/v1/chat/completions":
			n, _ := count(body)
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n"+
				"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n", n)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func runAgainst(t *testing.T, url, mode string) *Summary {
	t.Helper()
	cfg := Config{
		Target:          Target{BaseURL: url + "/v1", Endpoint: EndpointChat, Model: "m", Stream: true, Timeout: time.Minute},
		Workload:        &workload.Synthetic{Chat: true, Input: workload.Uniform{Lo: 20, Hi: 300}, Output: workload.Fixed(1), Turns: 1, Seed: 4},
		Load:            workload.Load{Concurrency: 2, Requests: 30},
		OutDir:          filepath.Join(t.TempDir(), "run"),
		SkipCalibration: true, ScrapeInterval: -1, PromptTokenizer: mode,
	}
	res, err := Run(context.Background(), cfg, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	return res.Summary
}

// Against a vLLM-like server: prompts are sized against its /tokenize, and
// its usage agrees with what was asked; without one (or with a count
// under another case), the gap its usage shows is reported and warned.
func TestPromptsSizedAgainstVLLMTokenize(t *testing.T) {
	sum := runAgainst(t, fakeVLLM(t, true, "count").URL, PromptTokenizerAuto)
	pl := sum.Prompts
	if pl == nil || pl.Tokenizer != "vLLM /tokenize" || pl.Sized != 30 || pl.Requests != 30 || pl.GapMin != 0 || pl.GapMax != 0 || pl.Beyond != 0 {
		t.Errorf("sized against vLLM's /tokenize: %+v", pl)
	}
	for _, w := range sum.Client.Warnings {
		if strings.Contains(w, "prompt lengths") {
			t.Errorf("warned: %s", w)
		}
	}
	for _, tc := range []struct {
		name string
		srv  *httptest.Server
	}{{"no tokenizer", fakeVLLM(t, false, "count")}, {"a count under another case", fakeVLLM(t, true, "Count")}} {
		t.Run(tc.name, func(t *testing.T) {
			sum := runAgainst(t, tc.srv.URL, PromptTokenizerAuto)
			pl := sum.Prompts
			// The built-in count of a chat prompt is one role token and a
			// token a word; the server's is 3 and a token a word: +2.
			if pl == nil || pl.Tokenizer != "tokentrace" || pl.Sized != 0 || pl.Requests != 30 || pl.GapP50 != 2 || pl.GapMin != 2 || pl.GapMax != 2 ||
				pl.Beyond != 30 || pl.ServedMean-pl.RequestedMean != 2 || pl.Why == "" {
				t.Errorf("gap not reported: %+v", pl)
			}
			if !strings.Contains(strings.Join(sum.Client.Warnings, "\n"), "prompt lengths: 30 of 30 requests") {
				t.Errorf("no warning of the gap: %q", sum.Client.Warnings)
			}
		})
	}
	// --prompt-tokenizer server refuses a server without one.
	cfg := Config{Target: Target{BaseURL: fakeVLLM(t, false, "count").URL, Endpoint: EndpointChat, Model: "m", Stream: true},
		Workload: &workload.Synthetic{Chat: true, Input: workload.Fixed(8), Output: workload.Fixed(1), Turns: 1},
		Load:     workload.Load{Concurrency: 1, Requests: 1}, OutDir: filepath.Join(t.TempDir(), "run"), SkipCalibration: true,
		PromptTokenizer: PromptTokenizerServer}
	if _, err := Run(context.Background(), cfg, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "--prompt-tokenizer server") {
		t.Errorf("want a refusal naming --prompt-tokenizer, got %v", err)
	}
}
