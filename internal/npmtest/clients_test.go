package npmtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/gateway"
	"github.com/tokentrace/tokentrace/internal/gateway/gatewaytest"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/process"
	"github.com/tokentrace/tokentrace/internal/serve"
	"github.com/tokentrace/tokentrace/internal/tokenizer"
	"github.com/tokentrace/tokentrace/internal/workload"
)

const (
	model  = "sim-model"
	apiKey = "sk-npm-test"
	think  = 3 // reasoning tokens of each answer of the reasoning serve
)

// result is what clients.mjs prints: the final answer and reasoning texts
// as the SDK assembles them, the texts of its deltas, and the usage it
// reports.
type result struct {
	Text              string `json:"text"`
	Streamed          string `json:"streamed"`
	Reasoning         string `json:"reasoning"`
	StreamedReasoning string `json:"streamed_reasoning"`
	InputTokens       *int   `json:"input_tokens"`
	OutputTokens      *int   `json:"output_tokens"`
}

// node returns the path of node, skipping the test when node or the
// clients .ci/run installs are absent.
func node(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	if _, err := os.Stat(filepath.Join("testdata", "node_modules", "ai", "package.json")); err != nil {
		t.Skip("the npm clients are not installed: run npm ci in internal/npmtest/testdata (.ci/run does)")
	}
	return path
}

// run runs one check of clients.mjs against base (a base URL without /v1)
// for model.
func run(t *testing.T, nodePath, check, base, model string, maxTokens int) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodePath, "clients.mjs", check, base, model, strconv.Itoa(maxTokens))
	cmd.Dir = "testdata"
	cmd.Env = append(os.Environ(), "TOKENTRACE_API_KEY="+apiKey)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := process.Output(cmd)
	if err != nil {
		t.Fatalf("%s: %v\n%s", check, err, stderr.String())
	}
	var r result
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%s printed %q: %v", check, out, err)
	}
	return r
}

// startServe runs serve in process, each engine step taking a millisecond
// and each answer's first think tokens reasoning (none when 0), and
// returns its base URL without /v1.
func startServe(t *testing.T, think int) string {
	t.Helper()
	var reasoning workload.Dist
	if think > 0 {
		reasoning = workload.Fixed(think)
	}
	s, err := serve.Start(context.Background(), serve.Config{Engine: engine.Config{
		Model:       model,
		StepTimer:   engine.StepTimerFunc(func(*perfmodel.Batch) time.Duration { return time.Millisecond }),
		BlockSize:   16,
		NumBlocks:   512,
		MaxModelLen: 4096,
		MaxNumSeqs:  64,
		Seed:        1,
		Reasoning:   reasoning,
	}}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return strings.TrimSuffix(s.URL(), "/v1")
}

// startGateway runs the gateway in front of the serve at base, with one
// API key, and returns its base URL.
func startGateway(t *testing.T, base string) string {
	t.Helper()
	url, _ := gatewaytest.Start(t, fmt.Sprintf(`
pools: [{name: sim, replicas: [{url: %q, kind: tokentrace}]}]
routes: [{model: %s, pool: sim}]
keys: [{name: t, sha256: %s}]
`, base, model, gateway.HashKey(apiKey)))
	return url
}

// TestClients runs each client against serve and against the gateway in
// front of serve, without and with a reasoning phase: the texts arrive in
// full (deltas add up to the final texts; reasoning and answer together
// max_tokens tokens) and the usage counts the prompt and the output.
func TestClients(t *testing.T) {
	nodePath := node(t)
	served, thinking := startServe(t, 0), startServe(t, think)
	hops := []struct {
		name, base string
		think      int
	}{
		{"serve", served, 0}, {"gateway", startGateway(t, served), 0},
		{"serve-reasoning", thinking, think}, {"gateway-reasoning", startGateway(t, thinking), think},
	}
	wantInput := tokenizer.CountChat([]tokenizer.Message{{Role: "system", Content: "You are terse."}, {Role: "user", Content: "Hi!"}})
	checks := []struct {
		check     string
		maxTokens int
	}{
		{"aisdk-generate", 7},
		{"aisdk-stream", 11},
		{"openai-responses-stream", 9},
		{"anthropic-messages-stream", 8},
	}
	for _, hop := range hops {
		for _, c := range checks {
			t.Run(hop.name+"/"+c.check, func(t *testing.T) {
				r := run(t, nodePath, c.check, hop.base, model, c.maxTokens)
				if r.Streamed != r.Text || r.StreamedReasoning != r.Reasoning {
					t.Errorf("deltas %q and reasoning deltas %q; final text %q and reasoning %q", r.Streamed, r.StreamedReasoning, r.Text, r.Reasoning)
				}
				if n := tokenizer.Count(r.Text); n != c.maxTokens-hop.think {
					t.Errorf("text %q is %d tokens, want %d", r.Text, n, c.maxTokens-hop.think)
				}
				if n := tokenizer.Count(r.Reasoning); n != hop.think {
					t.Errorf("reasoning %q is %d tokens, want %d", r.Reasoning, n, hop.think)
				}
				if r.InputTokens == nil || *r.InputTokens != wantInput || r.OutputTokens == nil || *r.OutputTokens != c.maxTokens {
					t.Errorf("usage: input %v, output %v tokens; want %d and %d", deref(r.InputTokens), deref(r.OutputTokens), wantInput, c.maxTokens)
				}
			})
		}
	}
}

func deref(p *int) any {
	if p == nil {
		return "absent"
	}
	return *p
}
