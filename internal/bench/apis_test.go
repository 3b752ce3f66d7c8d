package bench

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/gateway/gatewaytest"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/scrape"
	"github.com/tokentrace/tokentrace/internal/serve"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// TestEndpointsGiveRecordsOfOneMeaning benches the embedded engine, a
// reasoning model, through each API, streamed and whole: every record
// says the same — 20 reasoning tokens kept apart from the 10 of the
// answer, the first answer token after the first reasoning one, the exact
// prompt length, the finish reason "length" — whatever the API's own
// events, usage fields and finish reasons.
func TestEndpointsGiveRecordsOfOneMeaning(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine")
	}
	srv := startSim(t, func(o *serve.Options) {
		o.Engine.ReasoningTokens = "20"
		o.Engine.NaturalOutputTokens = "max" // Ollama has no ignore_eos
	})
	for _, ep := range []string{EndpointChat, EndpointResponses, EndpointMessages, EndpointOllama} {
		for _, stream := range []bool{true, false} {
			dir := filepath.Join(t.TempDir(), "run")
			cfg := Config{
				Target:   Target{BaseURL: srv.URL(), Endpoint: ep, Stream: stream, IgnoreEOS: true, Timeout: time.Minute},
				Workload: &workload.Synthetic{Chat: true, Input: workload.Fixed(64), Output: workload.Fixed(30), Turns: 1, Seed: 1},
				Load:     workload.Load{Concurrency: 2, Requests: 4},
				OutDir:   dir, SkipCalibration: true,
			}
			if _, err := Run(context.Background(), cfg, &bytes.Buffer{}); err != nil {
				t.Fatalf("%s: %v", ep, err)
			}
			for _, r := range readRecords(t, filepath.Join(dir, results.RequestsFile)) {
				reasoning, answer := 20, 10
				if !stream && ep == EndpointOllama {
					reasoning, answer = 0, 30 // Ollama's whole answer counts its thinking in eval_count
				}
				if !r.OK() || r.InputTokens != 64 || r.FinishReason != "length" || r.ReasoningTokens != reasoning || r.OutputTokens != answer {
					t.Errorf("%s stream %v: %s: ok %v (%s) input %d finish %q reasoning %d answer %d", ep, stream, r.ID, r.OK(), r.Error,
						r.InputTokens, r.FinishReason, r.ReasoningTokens, r.OutputTokens)
					continue
				}
				if stream && (r.FirstReasonNS == 0 || r.FirstTokenNS < r.FirstReasonNS || len(r.ChunkNS) == 0) {
					t.Errorf("%s: %s first reasoning %d, first answer %d, %d chunks", ep, r.ID, r.FirstReasonNS, r.FirstTokenNS, len(r.ChunkNS))
				}
				if r.Server == nil {
					t.Errorf("%s stream %v: %s has no server split", ep, stream, r.ID)
				}
			}
		}
	}
}

// TestReasoningAgreesAtEveryHop benches serve, a reasoning model (20
// reasoning tokens, then 10 of answer), through the gateway in front of
// it, over every API that carries reasoning, and holds the client's
// ttft_answer and the gateway's first-answer stage to the engine's own
// reasoning: its length in tokens, and its time (server_reasoning in
// serve's Server-Timing, passed on by the gateway).
//
// Whatever the machine's load, by causality: the client read its first
// answer token no sooner than the server's receipt-to-first-answer time
// (frontend, queue, prefill, reasoning) after its send, and the gateway
// no sooner than that after its receipt; the gateway's times to first
// answer, summed, are no more than the client's. The reasoning phase as
// each hop saw it — the client's ttft_answer − ttft, the gateway's
// reasoning stage — is the engine's within a factor of four, a bound a
// loaded host (which can deliver a reasoning token late, or reasoning and
// answer in one read) stays inside of on the median and the sum.
func TestReasoningAgreesAtEveryHop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine and the gateway")
	}
	const think, answer, requests = 20, 10, 6
	srv := startSim(t, func(o *serve.Options) {
		o.Engine.ReasoningTokens = fmt.Sprint(think)
		o.Engine.NaturalOutputTokens = "max" // Ollama has no ignore_eos
	})
	const rounding = 2 * time.Microsecond // a Server-Timing figure is rounded to a microsecond
	for _, ep := range []string{EndpointChat, EndpointResponses, EndpointMessages, EndpointOllama} {
		t.Run(ep, func(t *testing.T) {
			gw, _ := gatewaytest.Start(t, gatewaytest.OnePool(strings.TrimSuffix(srv.URL(), "/v1"), "tokentrace"))
			dir := filepath.Join(t.TempDir(), "run")
			cfg := Config{
				Target:   Target{BaseURL: gw + "/v1", Endpoint: ep, Stream: true, IgnoreEOS: true, Timeout: time.Minute},
				Workload: &workload.Synthetic{Chat: true, Input: workload.Fixed(64), Output: workload.Fixed(think + answer), Turns: 1, Seed: 1},
				Load:     workload.Load{Concurrency: 1, Requests: requests},
				OutDir:   dir, SkipCalibration: true,
			}
			if _, err := Run(context.Background(), cfg, &bytes.Buffer{}); err != nil {
				t.Fatal(err)
			}
			engine, client, toAnswer, clientAnswer := reasoningPhases(t, filepath.Join(dir, results.RequestsFile), think, answer)
			if len(engine) != requests {
				t.Fatalf("%d records, want %d", len(engine), requests)
			}
			m, err := scrape.Get(context.Background(), http.DefaultClient, gw+"/metrics", nil)
			if err != nil {
				t.Fatal(err)
			}
			n, firstAnswer, _ := m.Histogram("tokentrace_gateway_time_to_first_answer_seconds")
			nr, gwReasoning, _ := m.Histogram("tokentrace_gateway_reasoning_seconds")
			sum := func(s float64) time.Duration { return time.Duration(s * 1e9) }
			if n != requests || nr > requests {
				t.Fatalf("the gateway observed %d first answers and %d reasoning phases, want %d", n, nr, requests)
			}
			if fa := sum(firstAnswer); fa < toAnswer-time.Duration(4*requests)*rounding || fa > clientAnswer {
				t.Errorf("the gateway's times to first answer sum to %v: want no less than the server's %v, no more than the client's %v",
					fa, toAnswer, clientAnswer)
			}
			median := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
			var engineSum time.Duration
			for _, d := range engine {
				engineSum += d
			}
			e, c, g := median(engine), median(client), sum(gwReasoning)
			t.Logf("reasoning phase, %d tokens: engine P50 %v, client ttft_answer − ttft P50 %v; gateway's sum %v over %d requests, engine's %v",
				think, e, c, g, nr, engineSum)
			if c < e/4 || c > 4*e {
				t.Errorf("the client's reasoning phase P50 %v, the engine's %v", c, e)
			}
			if g < engineSum/4 || g > 4*engineSum {
				t.Errorf("the gateway's reasoning stage sums to %v, the engine's to %v", g, engineSum)
			}
		})
	}
}

// reasoningPhases reads a run of a reasoning model's streams (think
// reasoning tokens, then answer tokens) and returns, per request, the
// engine's reasoning (server_reasoning) and the client's (ttft_answer −
// ttft), and over the requests the sums of the server's receipt-to-first-
// answer times and of the client's ttft_answer. It fails the test on a
// record that is not such an answer, or whose first answer the client
// read before the server made it.
func reasoningPhases(t *testing.T, path string, think, answer int) (engine, client []time.Duration, toAnswer, clientAnswer time.Duration) {
	t.Helper()
	const rounding = 2 * time.Microsecond // a Server-Timing figure is rounded to a microsecond
	for _, r := range readRecords(t, path) {
		server := map[latency.TimingName]time.Duration{}
		for _, s := range r.Timing {
			if s.Hop == latency.HopServer {
				server[latency.TimingName(s.Name)] = time.Duration(s.NS)
			}
		}
		reasoning, ok := server[latency.TimingServerReasoning]
		if !r.OK() || r.ReasoningTokens != think || r.OutputTokens != answer || r.FirstReasonNS == 0 || !ok || r.Server == nil {
			t.Fatalf("%s: ok %v (%s), reasoning %d answer %d tokens, first reasoning at %d, server stages %v",
				r.ID, r.OK(), r.Error, r.ReasoningTokens, r.OutputTokens, r.FirstReasonNS, server)
		}
		ttft, _ := r.TTFT()
		ttftAnswer, ok := r.TTFTAnswer()
		if !ok || ttftAnswer < ttft {
			t.Fatalf("%s: ttft_answer %v (%v), ttft %v", r.ID, ttftAnswer, ok, ttft)
		}
		want := server[latency.TimingFrontend] + time.Duration(r.Server.QueueNS+r.Server.PrefillNS) + reasoning
		if ttftAnswer < want-4*rounding {
			t.Errorf("%s: ttft_answer %v, before the server's first answer token, %v after its receipt", r.ID, ttftAnswer, want)
		}
		engine, client = append(engine, reasoning), append(client, ttftAnswer-ttft)
		toAnswer, clientAnswer = toAnswer+want, clientAnswer+ttftAnswer
	}
	return engine, client, toAnswer, clientAnswer
}
