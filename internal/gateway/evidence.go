package gateway

import (
	"slices"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openai"
)

// The upstream engine's own per-request evidence, read through latency's
// adapters (latency/engines.go) as the answer passes: a per-request
// metrics object (vLLM's, tokentrace's), llama.cpp's timings (on a whole
// answer and on a stream's last chunk), TGI's timing headers (on a whole
// answer). A Server-Timing from the upstream takes precedence over all of
// them (foldServerTiming); among them the order is bench's: metrics, then
// llama.cpp's timings, then TGI's headers. Ollama's durations come only
// with its native /api endpoints, which the gateway does not proxy.

// noteEvidence keeps the engine split one event (or a whole answer's
// body, read as a chunk) carries, when no earlier evidence of higher
// precedence was kept.
func (x *exchange) noteEvidence(c *openai.ChunkInfo) {
	if c.Metrics != nil {
		if sp := latency.SplitFromMetrics(c.Metrics); sp != nil {
			x.engineSplit = sp
			return
		}
	}
	if c.Timings != nil && (x.engineSplit == nil || x.engineSplit.Source == latency.SourceLlamaCppTimings) {
		if sp := latency.SplitFromLlamaCppTimings(c.Timings); sp != nil {
			x.engineSplit = sp
		}
	}
}

// useEngineSplit makes the engine's split (noteEvidence; for a whole
// answer, TGI's headers when nothing else gave one) the timeline's, when
// the upstream sent no Server-Timing split.
func (x *exchange) useEngineSplit(h interface{ Get(string) string }) {
	if x.tl.serverSplit || x.tl.splitForwarded {
		return
	}
	sp := x.engineSplit
	if sp == nil && x.tl.whole && h != nil {
		sp = latency.SplitFromTGIHeaders(h.Get)
	}
	if sp == nil {
		return
	}
	x.engineSplit = sp
	x.tl.serverQueue, x.tl.serverPrefill, x.tl.serverDecode = time.Duration(sp.QueueNS), time.Duration(sp.PrefillNS), time.Duration(sp.DecodeNS)
	x.tl.unreported = sp.Unreported
	x.tl.serverSplit, x.tl.fromEvidence = true, true
}

// upstreamSplit is upstream_ttft divided by the upstream's own evidence:
// its queue and prefill where it reports them, and the network (the rest:
// transit and its HTTP frontend) only when every server stage inside
// upstream_ttft is reported — otherwise the rest holds an unreported stage
// too (llama.cpp's wait for a slot) and is left unattributed, never called
// network.
type upstreamSplit struct {
	queue, prefill, network          time.Duration
	hasQueue, hasPrefill, hasNetwork bool
}

// reports says whether the upstream's evidence gives a stage
// (latency.SplitQueue, SplitPrefill, SplitDecode).
func (t *timeline) reports(stage string) bool { return !slices.Contains(t.unreported, stage) }
