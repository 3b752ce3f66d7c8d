package llamacpptest

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

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

var update = flag.Bool("update", false, "record the llama-server exchange into ../latency/testdata/engines")

// TestRecordExchange records a streamed and a whole answer of the real
// llama-server as the fixtures latency's adapters are tested on (with
// -update), and otherwise checks that the server still sends the timings
// keys the fixtures hold.
func TestRecordExchange(t *testing.T) {
	s := Start(t, Options{Slots: 2})
	dir := filepath.Join("..", "latency", "testdata", "engines")
	for _, c := range []struct {
		file   string
		stream bool
	}{{"llamacpp-stream.sse", true}, {"llamacpp-answer.json", false}} {
		body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"hello there, how are you"}],"max_tokens":16,"ignore_eos":true,"stream":%v}`, c.stream)
		// A fresh connection each: llama-server closes one after a stream.
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Post(s.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %v\n%s", c.file, resp.StatusCode, err, got)
		}
		path := filepath.Join(dir, c.file)
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := timingsKeys(t, got), timingsKeys(t, want); !slices.Equal(a, b) {
			t.Errorf("%s: llama-server's timings keys are %v, the fixture's %v (run with -update to record again)", c.file, a, b)
		}
	}
}

// timingsKeys are the keys of the last "timings" object in an answer or a
// stream.
func timingsKeys(t *testing.T, b []byte) []string {
	t.Helper()
	var last []byte
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimPrefix(strings.TrimSpace(line), "data: ")
		if strings.Contains(line, `"timings"`) {
			last = []byte(line)
		}
	}
	var m struct {
		Timings map[string]json.RawMessage `json:"timings"`
	}
	if err := json.Unmarshal(last, &m); err != nil || m.Timings == nil {
		t.Fatalf("no timings in %s", b)
	}
	return slices.Sorted(maps.Keys(m.Timings))
}
