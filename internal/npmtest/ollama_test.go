package npmtest

import (
	"context"
	"net/http"
	"testing"

	"github.com/tokentrace/tokentrace/internal/gateway/gatewaytest"
	"github.com/tokentrace/tokentrace/internal/ollamatest"
	"github.com/tokentrace/tokentrace/internal/scrape"
)

// TestClientsAgainstOllama runs the checks — the AI SDK's generateText
// and streamText, a streamed Responses call with openai and a streamed
// Messages call with @anthropic-ai/sdk — against a real engine, Ollama,
// directly and with the gateway in front (before, the gateway answered
// the Responses and Messages calls 404 unknown path): each call's deltas
// add up to its final text, and its usage counts the prompt and every
// answer token (the model never samples its end token, so each answer
// runs to its limit). The gateway measured each of the three streams: a
// first answer time apiece.
func TestClientsAgainstOllama(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ollama")
	}
	nodePath := node(t)
	s := ollamatest.Start(t, ollamatest.Options{Parallel: 2})
	gw, _ := gatewaytest.Start(t, gatewaytest.OnePool(s.URL, ""))
	checks := []struct {
		check     string
		maxTokens int
	}{
		{"aisdk-generate", 7},
		{"aisdk-stream", 11},
		{"openai-responses-stream", 9},
		{"anthropic-messages-stream", 8},
	}
	for _, hop := range []struct{ name, base string }{{"ollama", s.URL}, {"gateway", gw}} {
		for _, c := range checks {
			t.Run(hop.name+"/"+c.check, func(t *testing.T) {
				r := run(t, nodePath, c.check, hop.base, s.Model, c.maxTokens)
				if r.Text == "" || r.Streamed != r.Text || r.Reasoning != "" {
					t.Errorf("deltas %q; final text %q, reasoning %q", r.Streamed, r.Text, r.Reasoning)
				}
				if r.InputTokens == nil || *r.InputTokens <= 0 || r.OutputTokens == nil || *r.OutputTokens != c.maxTokens {
					t.Errorf("usage: input %v, output %v tokens; want some and %d", deref(r.InputTokens), deref(r.OutputTokens), c.maxTokens)
				}
			})
		}
	}
	m, err := scrape.Get(context.Background(), http.DefaultClient, gw+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, _, _ := m.Histogram("tokentrace_gateway_time_to_first_answer_seconds"); n != uint64(len(checks)-1) {
		t.Errorf("the gateway observed %d first answers, want one per stream (%d)", n, len(checks)-1)
	}
}
