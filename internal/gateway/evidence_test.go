package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openaitest"
)

// The answers of engines that time their own requests without
// Server-Timing, as they send them: llama.cpp's timings on a stream's
// last chunk and on a whole answer (the recorded exchange in
// internal/latency/testdata/engines), TGI's timing headers on a whole
// answer (router/src/server.rs).
const (
	llamaTimings   = `"timings":{"cache_n":0,"prompt_n":34,"prompt_ms":6.25,"prompt_per_token_ms":0.18,"predicted_n":2,"predicted_ms":2.5}`
	llamaLastChunk = `data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"length"}],` + llamaTimings + "}\n\n"
	// vLLM's final usage chunk with its merged per-request metrics
	// (latency/testdata/engines/vllm-stream.sse).
	vllmUsageChunk = `data: {"id":"x","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":42,"total_tokens":44,"completion_tokens":2},` +
		`"metrics":{"time_to_first_token_ms":31.75,"generation_time_ms":9.5,"queue_time_ms":118.25,"mean_itl_ms":9.5,"tokens_per_second":48.6}}` + "\n\n"
	llamaWhole = `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi there"},"finish_reason":"length"}],` +
		`"usage":{"prompt_tokens":34,"completion_tokens":2,"total_tokens":36},` + llamaTimings + "}"
	tgiWhole = `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"length"}],` +
		`"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`
)

// engineUpstream answers every request with body (a stream when it starts
// with "data:", else a whole JSON answer) and the given headers.
func engineUpstream(t *testing.T, body string, hdr map[string]string) string {
	t.Helper()
	u := &openaitest.Upstream{Script: body, Header: http.Header{}}
	if !strings.HasPrefix(body, "data:") {
		u.ScriptType = "application/json"
	}
	for k, v := range hdr {
		u.Header.Set(k, v)
	}
	return openaitest.Start(t, u).URL()
}

// stageCount is how many samples a stage histogram of the default pool
// holds.
func stageCount(t *testing.T, g *Gateway, name latency.TimingName) uint64 {
	t.Helper()
	var m dto.Metric
	if err := g.Metrics.Stage[name].WithLabelValues("default", "*").(prometheusMetric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// TestEngineEvidenceInTheGatewaysSplit: the gateway reads the upstream
// engine's own per-request evidence through latency's adapters, so its
// Server-Timing, its stage histograms and its spans carry the engine's
// split: llama.cpp's prompt_ms as prefill (streamed and whole), TGI's
// x-queue-time as the server's queue and x-inference-time as its decode.
// A stage the engine does not report is left out — not sent as 0 — and
// so is the network, which would otherwise hold it (llama.cpp's wait for
// a slot is no network time).
func TestEngineEvidenceInTheGatewaysSplit(t *testing.T) {
	for _, c := range []struct {
		name   string
		stream bool
		body   string
		hdr    map[string]string
		want   map[latency.TimingName]time.Duration
		absent []latency.TimingName
	}{
		{"llama.cpp, streamed", true, roleChunk + textChunk + textChunk + llamaLastChunk + doneEvent, nil,
			map[latency.TimingName]time.Duration{latency.TimingPrefill: 6250 * time.Microsecond, latency.TimingServerDecode: 2500 * time.Microsecond},
			[]latency.TimingName{latency.TimingServerQueue, latency.TimingNetwork}},
		{"vLLM's merged metrics, streamed", true, roleChunk + textChunk + stopChunk + vllmUsageChunk + doneEvent, nil,
			map[latency.TimingName]time.Duration{latency.TimingServerQueue: 118250 * time.Microsecond,
				latency.TimingPrefill: 31750 * time.Microsecond, latency.TimingServerDecode: 9500 * time.Microsecond},
			nil},
		{"llama.cpp, whole", false, llamaWhole, nil,
			map[latency.TimingName]time.Duration{latency.TimingPrefill: 6250 * time.Microsecond, latency.TimingServerDecode: 2500 * time.Microsecond},
			[]latency.TimingName{latency.TimingServerQueue, latency.TimingNetwork}},
		{"TGI, whole", false, tgiWhole, map[string]string{"x-queue-time": "7", "x-inference-time": "40", "x-time-per-token": "20"},
			map[latency.TimingName]time.Duration{latency.TimingServerQueue: 7 * time.Millisecond, latency.TimingServerDecode: 40 * time.Millisecond},
			[]latency.TimingName{latency.TimingPrefill}},
		{"TGI's headers on a stream are not read (TGI sends none there)", true, roleChunk + textChunk + stopChunk + doneEvent,
			map[string]string{"x-queue-time": "7", "x-inference-time": "40"}, nil,
			[]latency.TimingName{latency.TimingServerQueue, latency.TimingPrefill, latency.TimingNetwork}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := quickGateway(t, engineUpstream(t, c.body, c.hdr))
			gw := startGateway(t, g)
			resp := post(t, t.Context(), gw.URL, chatBody("m", c.stream, "x", ""), nil)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			trailer := resp.Trailer.Get("Server-Timing")
			got := timingMap(trailer)
			for name, d := range c.want {
				if got[name] != d {
					t.Errorf("Server-Timing %s = %v, want %v: %s", name, got[name], d, trailer)
				}
				if name == latency.TimingServerDecode {
					continue // no histogram of its own
				}
				if n := stageCount(t, g, name); n != 1 {
					t.Errorf("stage histogram %s: %d samples, want 1", name, n)
				}
			}
			for _, name := range c.absent {
				if _, ok := got[name]; ok {
					t.Errorf("Server-Timing has %s, which the upstream does not report: %s", name, trailer)
				}
				if name == latency.TimingServerDecode {
					continue
				}
				if n := stageCount(t, g, name); n != 0 {
					t.Errorf("stage histogram %s: %d samples, want none", name, n)
				}
			}
			if _, ok := got[latency.TimingNetwork]; c.name == "TGI, whole" && !ok {
				// Queue and decode (which holds prefill) cover the server's
				// part of a whole answer: the rest is the network's.
				t.Errorf("no network stage for a split that covers the server's whole time: %s", trailer)
			}
			if strings.Contains(c.body, "timings") && !strings.Contains(string(b), `"prompt_ms":6.25`) {
				// The answer's own evidence passes through untouched: a
				// client behind the gateway reads it too.
				t.Errorf("llama.cpp's timings were not passed on: %s", b)
			}
		})
	}
}
