package ollamatest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/tokenizer"
)

func TestModelfile(t *testing.T) {
	got := string(Modelfile("/m/model.gguf", 1, 1024))
	if want := "FROM /m/model.gguf\nPARAMETER num_thread 1\nPARAMETER num_ctx 1024\n"; got != want {
		t.Errorf("Modelfile:\n%s\nwant:\n%s", got, want)
	}
}

// The server's environment is its own: no OLLAMA_ setting or HOME of the
// process running the tests leaks into it.
func TestEnvironIsolated(t *testing.T) {
	t.Setenv("OLLAMA_HOST", "0.0.0.0:11434")
	t.Setenv("OLLAMA_MODELS", "/somewhere/else")
	s, err := newServer("ollama", t.TempDir(), Options{Parallel: 2, KeepAlive: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = "127.0.0.1:5"
	env := strings.Join(s.Environ(), "\n") + "\n"
	for _, want := range []string{"OLLAMA_HOST=127.0.0.1:5\n", "OLLAMA_NUM_PARALLEL=2\n", "OLLAMA_KEEP_ALIVE=3s\n",
		"OLLAMA_MODELS=" + s.models + "\n", "HOME=" + s.home + "\n"} {
		if !strings.Contains(env, want) {
			t.Errorf("environment lacks %q", want)
		}
	}
	if strings.Contains(env, "0.0.0.0:11434") || strings.Contains(env, "/somewhere/else") {
		t.Errorf("the caller's OLLAMA_ settings leak in:\n%s", env)
	}
}

// TestServerAnswers starts a real Ollama and checks what the rest of the
// suite relies on: the model imported with its chat template recognized,
// a native chat answer that runs to num_predict with Ollama's durations,
// an OpenAI chat answer that runs to max_tokens with its usage, and a
// prompt of filler words counted as tokentrace's tokenizer counts it.
func TestServerAnswers(t *testing.T) {
	s := Start(t, Options{Parallel: 2})
	out, err := s.Command(30*time.Second, "show", s.Model, "--template")
	if err != nil || !strings.Contains(out, "<|assistant|>") || !strings.Contains(out, "</s>") {
		t.Errorf("the imported model's template is not Zephyr's (%v):\n%s", err, out)
	}
	words := 40
	content := tokenizer.Filler(words, 1)
	var native struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		DoneReason         string `json:"done_reason"`
		PromptEvalCount    int    `json:"prompt_eval_count"`
		EvalCount          int    `json:"eval_count"`
		LoadDuration       int64  `json:"load_duration"`
		PromptEvalDuration int64  `json:"prompt_eval_duration"`
		EvalDuration       int64  `json:"eval_duration"`
	}
	post(t, s.URL+"/api/chat", `{"model":"`+s.Model+`","messages":[{"role":"user","content":"`+content+`"}],"stream":false,"options":{"num_predict":24}}`, &native)
	if native.EvalCount != 24 || native.DoneReason != "length" {
		t.Errorf("eval_count %d, done_reason %q: want 24 tokens to the length limit", native.EvalCount, native.DoneReason)
	}
	if native.LoadDuration <= 0 || native.PromptEvalDuration <= 0 || native.EvalDuration <= 0 {
		t.Errorf("durations: load %d, prompt eval %d, eval %d ns", native.LoadDuration, native.PromptEvalDuration, native.EvalDuration)
	}
	// The template's markup (<|user|>, newlines, </s>, <|assistant|>) and
	// the start token around one token per filler word.
	if extra := native.PromptEvalCount - words; extra < 2 || extra > 40 {
		t.Errorf("prompt_eval_count %d for %d filler words", native.PromptEvalCount, words)
	}
	t.Logf("native: %d prompt tokens, load %.1f ms, prompt eval %.1f ms, eval %.1f ms; answer %q", native.PromptEvalCount,
		float64(native.LoadDuration)/1e6, float64(native.PromptEvalDuration)/1e6, float64(native.EvalDuration)/1e6, native.Message.Content)
	var oai struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	raw := post(t, s.URL+"/v1/chat/completions", `{"model":"`+s.Model+`","messages":[{"role":"user","content":"hello there"}],"max_tokens":16}`, &oai)
	if oai.Usage.CompletionTokens != 16 || len(oai.Choices) != 1 || oai.Choices[0].FinishReason != "length" {
		t.Errorf("OpenAI answer: %+v", oai)
	}
	// Its OpenAI-compatible answers carry none of its durations
	// (docs/engines.md): the evidence comes only with /api.
	if strings.Contains(string(raw), "duration") {
		t.Errorf("the OpenAI-compatible answer carries durations now: %s", raw)
	}
}

// post sends body to url, decodes the answer into into and returns it.
func post(t *testing.T, url, body string, into any) []byte {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d %v\n%s", url, resp.StatusCode, err, b)
	}
	if err := json.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v\n%s", url, err, b)
	}
	return b
}
