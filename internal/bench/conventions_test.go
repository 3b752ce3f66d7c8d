package bench

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tokentrace/tokentrace/internal/latency"
)

// Streams in the shapes the common servers send (from their public API
// documentation and source), one event per line.
func TestServerConventions(t *testing.T) {
	type want struct {
		Out       int
		Src       string
		Reasoning int
		Chunks    int
		Other     int
		ITLs      int
		Finish    string
		HasReason bool
	}
	tests := []struct {
		name   string
		events []string
		want   want
	}{
		{"OpenAI", []string{
			`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}`,
			`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}],"usage":null}`,
			`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" there"},"logprobs":null,"finish_reason":null}],"usage":null}`,
			`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}`,
			`{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11,"completion_tokens_details":{"reasoning_tokens":0}}}`,
		}, want{Out: 2, Src: latency.SourceUsage, Chunks: 2, Other: 2, ITLs: 1, Finish: "stop"}},
		{"vLLM continuous usage", []string{
			`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":9,"total_tokens":9,"completion_tokens":0}}`,
			`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hi th"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":9,"total_tokens":11,"completion_tokens":2}}`,
			`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"ere"},"logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":{"prompt_tokens":9,"total_tokens":12,"completion_tokens":3}}`,
			`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":9,"total_tokens":12,"completion_tokens":3}}`,
		}, want{Out: 3, Src: latency.SourceUsage, Chunks: 2, Other: 1, ITLs: 2, Finish: "length"}},
		{"SGLang / DeepSeek reasoning_content", []string{
			`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":"Let me"},"finish_reason":null}]}`,
			`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":null,"reasoning_content":" think"},"finish_reason":null}]}`,
			`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Yes","reasoning_content":null},"finish_reason":"stop","matched_stop":null}]}`,
			`{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":3,"total_tokens":7,"completion_tokens_details":{"reasoning_tokens":2}}}`,
		}, want{Out: 1, Src: latency.SourceUsage, Reasoning: 2, Chunks: 1, Other: 2, ITLs: 0, Finish: "stop", HasReason: true}},
		{"TGI usage on the last chunk", []string{
			`{"object":"chat.completion.chunk","id":"","created":1,"model":"m","system_fingerprint":"3.0","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"logprobs":null,"finish_reason":null}],"usage":null}`,
			`{"object":"chat.completion.chunk","id":"","created":1,"model":"m","system_fingerprint":"3.0","choices":[{"index":0,"delta":{"role":"assistant","content":" there"},"logprobs":null,"finish_reason":null}],"usage":null}`,
			`{"object":"chat.completion.chunk","id":"","created":1,"model":"m","system_fingerprint":"3.0","choices":[{"index":0,"delta":{"role":"assistant","content":"!"},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}`,
		}, want{Out: 3, Src: latency.SourceUsage, Chunks: 3, ITLs: 2, Finish: "length"}},
		{"llama.cpp server", []string{
			`{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1,"id":"c","model":"m","object":"chat.completion.chunk"}`,
			`{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"Hi"}}],"created":1,"id":"c","model":"m","object":"chat.completion.chunk"}`,
			`{"choices":[{"finish_reason":null,"index":0,"delta":{"content":" you"}}],"created":1,"id":"c","model":"m","object":"chat.completion.chunk"}`,
			`{"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1,"id":"c","model":"m","object":"chat.completion.chunk","usage":{"completion_tokens":3,"prompt_tokens":6,"total_tokens":9},"timings":{"prompt_n":6,"prompt_ms":12.5,"predicted_n":3,"predicted_ms":30.1}}`,
		}, want{Out: 3, Src: latency.SourceUsage, Chunks: 2, Other: 2, ITLs: 1, Finish: "stop"}},
		{"Ollama reasoning, no usage", []string{
			`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning":"Hmm"},"finish_reason":null}]}`,
			`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"},"finish_reason":null}]}`,
			`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":"stop"}]}`,
		}, want{Out: 1, Src: latency.SourceChunks, Reasoning: 1, Chunks: 1, Other: 2, ITLs: 0, Finish: "stop", HasReason: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var parts []string
			for _, e := range tt.events {
				parts = append(parts, "data: "+e+"\n\n")
			}
			parts = append(parts, "data: [DONE]\n\n")
			rec := do(t, newTestClient(t, sseServer(t, parts, "").URL, nil))
			if !rec.OK() {
				t.Fatalf("%s: %s", rec.ErrorKind, rec.Error)
			}
			got := want{Out: rec.OutputTokens, Src: rec.OutputSource, Reasoning: rec.ReasoningTokens, Chunks: len(rec.ChunkNS),
				Other: len(rec.OtherNS), ITLs: len(rec.ITLs(nil)), Finish: rec.FinishReason, HasReason: rec.FirstReasonNS != 0}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			// Reasoning before the answer: stamped no later than its first
			// token (the same instant when a busy machine reads both events
			// in one read, despite the server's pause between them).
			if rec.FirstTokenNS != rec.ChunkNS[0] || (rec.FirstReasonNS != 0 && rec.FirstReasonNS > rec.FirstTokenNS) {
				t.Errorf("first token %d, first reasoning %d, chunks %v", rec.FirstTokenNS, rec.FirstReasonNS, rec.ChunkNS)
			}
		})
	}
}
