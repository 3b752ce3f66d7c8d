package serve

import (
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/openai"
)

// FuzzParse runs request bodies through the server's whole front end
// (decode, validation, model check, tokenization, max_tokens) for both
// APIs: no input may panic, and an accepted request must fit the
// context.
func FuzzParse(f *testing.F) {
	s, err := New(testConfig(time.Millisecond))
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		`{"model":"sim-model","messages":[{"role":"user","content":"hi there"}],"max_tokens":3}`,
		`{"model":"sim-model","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"min_tokens":2000}`,
		`{"model":"sim-model","prompt":[[1,2,3]],"max_tokens":2047}`,
		`{"model":"sim-model","prompt":"x","max_tokens":2048}`,
		`{"model":"other","prompt":"x"}`,
		`{"model":"sim-model","input":"x","max_output_tokens":3,"stream":true}`,
		`{"model":"sim-model","input":[{"role":"user","content":[{"type":"input_text","text":"x"}]}],"instructions":"y"}`,
		`{"model":"sim-model","max_tokens":5,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":"x"}]}`,
		`{"model":"sim-model","messages":[{"role":"user","content":"x"}],"options":{"num_predict":4},"stream":false}`,
	} {
		f.Add([]byte(seed), "")
		f.Add([]byte(seed), "true")
	}
	maxLen := s.Engine().Config().MaxModelLen
	f.Fuzz(func(t *testing.T, body []byte, metricsHeader string) {
		for _, api := range openai.APIs {
			x := &exchange{api: api}
			if apiErr := s.parse(x, body, metricsHeader); apiErr != nil {
				if apiErr.Status < 400 || apiErr.Status > 499 || apiErr.Err.Message == "" {
					t.Fatalf("bad rejection %+v", apiErr)
				}
				continue
			}
			if x.p.MaxTokens < 1 || len(x.prompt) == 0 || x.p.MinTokens > x.p.MaxTokens ||
				(x.p.MaxTokens+len(x.prompt) > maxLen && x.p.MaxTokens == maxLen-len(x.prompt)) {
				t.Fatalf("accepted %+v with a %d-token prompt", x.p, len(x.prompt))
			}
		}
	})
}
