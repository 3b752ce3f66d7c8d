package serve

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openai"
)

// TestRequestTiming is the worked example of docs/metrics.md ("Server-side
// timing of one request"): received 0, handed to the engine at 0.4 ms,
// scheduled at 10.4 ms, first token at 60.4 ms, last (5th) token at
// 100.4 ms, a 250 ms injected stall.
func TestRequestTiming(t *testing.T) {
	r := time.Unix(1700000000, 0)
	at := func(us int) time.Time { return r.Add(time.Duration(us) * time.Microsecond) }
	x := &exchange{
		received: r,
		frontend: 400 * time.Microsecond,
		delay:    250 * time.Millisecond,
		hasTL:    true,
		tl: engine.Timeline{
			Arrival: at(400), Scheduled: at(10400), FirstToken: at(60400), Finished: at(100400),
			PromptTokens: 100, CachedTokens: 32, OutputTokens: 5, PrefillChunks: 2, Preemptions: 1,
			Finish: engine.FinishLength,
		},
	}
	want := openai.RequestMetrics{
		ArrivalTime:        1700000000,
		FrontendTimeMs:     0.4,
		QueueTimeMs:        10,
		PrefillTimeMs:      50,
		TimeToFirstTokenMs: 60.4,  // 0.4 + 10 + 50
		GenerationTimeMs:   40,    // 100.4 − 60.4
		E2ETimeMs:          100.4, // last token − received
		MeanITLMs:          10,    // 40 / (5 − 1)
		FaultDelayMs:       250,
		PromptTokens:       100, CachedTokens: 32, CompletionTokens: 5, PrefillChunks: 2, Preemptions: 1,
	}
	if diff := cmp.Diff(want, x.requestMetrics()); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	if got, want := x.serverTiming(), "frontend;dur=0.400, server_queue;dur=10.000, prefill;dur=50.000, server_decode;dur=40.000, fault;dur=250.000"; got != want {
		t.Errorf("Server-Timing %q, want %q", got, want)
	}
	// bench reads the trailer with latency.SplitServerTiming: the stages
	// come back as they were measured.
	split, gateway, ok := latency.SplitServerTiming([]string{x.serverTiming()})
	wantSplit := latency.ServerSplit{QueueNS: 10e6, PrefillNS: 50e6, DecodeNS: 40e6, Source: "server-timing"}
	if diff := cmp.Diff(wantSplit, split); !ok || gateway != 0 || diff != "" {
		t.Errorf("SplitServerTiming: ok %v, gateway %v, split (-want +got):\n%s", ok, gateway, diff)
	}
	// A timeline scheduled 3 ms before its arrival (the engine gives none
	// since it holds a request that arrives while it catches up for a
	// later step, but a timeline is data): its negative queue is sent as 0
	// (Server-Timing has no negative durations), the prefill as it is.
	caught := &exchange{frontend: 400 * time.Microsecond, hasTL: true,
		tl: engine.Timeline{Arrival: at(5400), Scheduled: at(2400), FirstToken: at(12400), Finished: at(52400), OutputTokens: 5}}
	if got, want := caught.serverTiming(), "frontend;dur=0.400, server_queue;dur=0.000, prefill;dur=10.000, server_decode;dur=40.000"; got != want {
		t.Errorf("Server-Timing of a negative queue %q, want %q", got, want)
	}
	// A reasoning model's chat answer: 3 reasoning tokens, the first at
	// 60.4 ms and the first answer token at 90.4 ms; server_reasoning is
	// those 30 ms, beside server_decode (a completions answer streams its
	// reasoning as text and reports none).
	think := &exchange{api: openai.APIChat, frontend: 400 * time.Microsecond, hasTL: true,
		tl: engine.Timeline{Arrival: at(400), Scheduled: at(10400), FirstToken: at(60400), FirstAnswer: at(90400),
			Finished: at(100400), OutputTokens: 5, ReasoningTokens: 3}}
	if got, want := think.serverTiming(), "frontend;dur=0.400, server_queue;dur=10.000, prefill;dur=50.000, server_decode;dur=40.000, server_reasoning;dur=30.000"; got != want {
		t.Errorf("Server-Timing of a reasoning answer %q, want %q", got, want)
	}
	think.api = openai.APICompletions
	if got, want := think.serverTiming(), "frontend;dur=0.400, server_queue;dur=10.000, prefill;dur=50.000, server_decode;dur=40.000"; got != want {
		t.Errorf("Server-Timing of a completions answer with reasoning %q, want %q", got, want)
	}
	early := &exchange{frontend: 120 * time.Microsecond}
	if got := early.serverTiming(); got != "frontend;dur=0.120" {
		t.Errorf("Server-Timing of a request refused before the engine: %q", got)
	}
}
