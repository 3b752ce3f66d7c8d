package bench

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/results"
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
