package llamacpptest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestShapeParams(t *testing.T) {
	// make_model.py prints params=17.6M and 75.4M for these shapes.
	for _, c := range []struct {
		s    Shape
		want int
	}{{Small, 17_564_928}, {Reference, 75_379_840}} {
		if got := c.s.Params(); got != c.want {
			t.Errorf("%s: Params() = %d, want %d", c.s, got, c.want)
		}
	}
}

func TestArgsBanByteTokens(t *testing.T) {
	args := Args("m.gguf", Options{Slots: 4, Context: 4096})
	joined := " " + strings.Join(args, " ") + " "
	for _, want := range []string{" -np 4 ", " -c 4096 ", " --metrics ", " -t 1 ", " -l 3-inf ", " -l 258-inf "} {
		if !strings.Contains(joined, want) {
			t.Errorf("args lack %q: %v", want, args)
		}
	}
	if strings.Contains(joined, " -l 2-inf ") || strings.Contains(joined, " -l 259-inf ") {
		t.Errorf("args ban more than the byte tokens 3..258: %v", args)
	}
}

// TestServerAnswers starts a real llama-server and checks what the rest
// of the suite relies on: /health, an OpenAI chat answer that runs to
// max_tokens with ignore_eos, llama.cpp's per-request timings, and
// /metrics under llamacpp: names.
func TestServerAnswers(t *testing.T) {
	s := Start(t, Options{Slots: 2})
	body := `{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":8,"ignore_eos":true}`
	resp, err := http.Post(s.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("chat completion: %d %v\n%s", resp.StatusCode, err, b)
	}
	var answer struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
		Timings map[string]float64 `json:"timings"`
	}
	if err := json.Unmarshal(b, &answer); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if answer.Usage.CompletionTokens != 8 {
		t.Errorf("completion_tokens = %d, want 8 (ignore_eos)\n%s", answer.Usage.CompletionTokens, b)
	}
	for _, k := range []string{"prompt_n", "prompt_ms", "predicted_n", "predicted_ms"} {
		if _, ok := answer.Timings[k]; !ok {
			t.Errorf("timings lack %s: %s", k, b)
		}
	}
	resp, err = http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, name := range []string{"llamacpp:requests_processing", "llamacpp:requests_deferred", "llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total"} {
		if !strings.Contains(string(m), name) {
			t.Errorf("/metrics lacks %s:\n%s", name, m)
		}
	}
}
