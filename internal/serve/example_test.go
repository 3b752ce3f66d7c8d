package serve_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/serve"
)

// Start runs the simulated engine behind the OpenAI API on a loopback
// port, as `tokentrace bench` does when given no --url.
func ExampleStart() {
	opts := serve.DefaultOptions() // Llama-3.1-8B on one H100, vLLM's defaults
	cfg, err := opts.Config()
	if err != nil {
		fmt.Println(err)
		return
	}
	srv, err := serve.Start(context.Background(), cfg, "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	body := `{"model":"Llama-3.1-8B","messages":[{"role":"user","content":"Hello there!"}],"max_tokens":4,"ignore_eos":true}`
	resp, err := http.Post(srv.URL()+"/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	var c openai.ChatCompletion
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.Status, c.Choices[0].FinishReason, c.Usage.PromptTokens, c.Usage.CompletionTokens)
	fmt.Println(srv.Engine().Config().NumBlocks > 0)
	// Output:
	// 200 OK length 4 4
	// true
}
