package bench

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tokentrace/tokentrace/internal/latency"
)

// TestEngineEvidence checks that each engine's own per-request evidence
// becomes the record's server split, with the engine and the evidence
// named: llama.cpp's timings on a stream's last chunk and on a whole
// answer, TGI's headers, Ollama's durations.
func TestEngineEvidence(t *testing.T) {
	llama := &latency.ServerSplit{PrefillNS: 20_250_000, DecodeNS: 75_500_000, Source: "llamacpp-timings", Engine: "llamacpp", Unreported: []string{"queue"}}
	timings := `"timings":{"cache_n":5,"prompt_n":21,"prompt_ms":20.25,"predicted_n":2,"predicted_ms":75.5}`
	t.Run("llama.cpp stream", func(t *testing.T) {
		rec := do(t, newTestClient(t, sseServer(t, []string{
			`data: {"choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n",
			`data: {"choices":[{"index":0,"delta":{"content":"b"}}]}` + "\n\n",
			`data: {"choices":[{"index":0,"finish_reason":"length","delta":{}}],"usage":{"prompt_tokens":26,"completion_tokens":2},` + timings + "}\n\n",
			"data: [DONE]\n\n"}, "").URL, nil))
		if diff := cmp.Diff(llama, rec.Server); diff != "" || rec.CachedTokens != 5 {
			t.Errorf("cached %d, split (-want +got):\n%s", rec.CachedTokens, diff)
		}
	})
	whole := func(t *testing.T, header http.Header, body string) *latency.Record {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			for k, v := range header {
				w.Header()[k] = v
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, body)
		}))
		t.Cleanup(srv.Close)
		return do(t, newTestClient(t, srv.URL, func(tg *Target) { tg.Stream = false }))
	}
	answer := `{"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"length"}],"usage":{"prompt_tokens":26,"completion_tokens":2}`
	t.Run("llama.cpp answer", func(t *testing.T) {
		rec := whole(t, nil, answer+","+timings+"}")
		if diff := cmp.Diff(llama, rec.Server); diff != "" {
			t.Errorf("split (-want +got):\n%s", diff)
		}
	})
	t.Run("TGI headers", func(t *testing.T) {
		rec := whole(t, http.Header{"X-Queue-Time": {"118"}, "X-Inference-Time": {"922"}, "X-Time-Per-Token": {"14"}}, answer+"}")
		want := &latency.ServerSplit{QueueNS: 118e6, DecodeNS: 922e6, Source: "tgi-headers", Engine: "tgi", Unreported: []string{"prefill"}}
		if diff := cmp.Diff(want, rec.Server); diff != "" {
			t.Errorf("split (-want +got):\n%s", diff)
		}
	})
	t.Run("Ollama durations", func(t *testing.T) {
		rec := whole(t, nil, answer+`,"done":true,"load_duration":1334875,"prompt_eval_duration":342546000,"eval_duration":4535599000}`)
		want := &latency.ServerSplit{PrefillNS: 342546000, DecodeNS: 4535599000, LoadNS: 1334875, Source: "ollama-durations", Engine: "ollama", Unreported: []string{"queue"}}
		if diff := cmp.Diff(want, rec.Server); diff != "" {
			t.Errorf("split (-want +got):\n%s", diff)
		}
	})
	t.Run("Server-Timing wins", func(t *testing.T) {
		rec := whole(t, http.Header{"Server-Timing": {"server_queue;dur=1, prefill;dur=2, server_decode;dur=3"}}, answer+","+timings+"}")
		if rec.Server == nil || rec.Server.Source != "server-timing" || rec.Server.QueueNS != 1e6 {
			t.Errorf("split %+v", rec.Server)
		}
	})
}
