package gateway

import (
	"bytes"
	"math"
	"slices"
	"time"

	"github.com/tokentrace/tokentrace/internal/jsonscan"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openai"
)

// The upstream engine's own per-request evidence, read through latency's
// adapters (latency/engines.go) as the answer passes: a per-request
// metrics object (vLLM's, tokentrace's), llama.cpp's timings (on a whole
// answer and on a stream's last chunk), TGI's timing headers (on a whole
// answer). A Server-Timing from the upstream takes precedence over all of
// them (foldServerTiming); among them the order is bench's: metrics, then
// llama.cpp's timings, then TGI's headers. Ollama's durations come with
// its native /api/chat, which the gateway passes on unchanged.

// evidenceEngines are the engines an engine split may name (timeline's
// engine indexes it; 0 is none).
var evidenceEngines = []string{"", latency.EngineVLLM, latency.EngineLlamaCpp, latency.EngineTGI, latency.EngineTokentrace,
	latency.EngineOllama, latency.EngineSGLang, latency.EngineTRTLLM}

// askFields are the body fields that ask an engine's OpenAI API for its
// per-request metrics object, by replica kind: vLLM's include_metrics and
// tokentrace serve's return_metrics. The other kinds have none to ask
// with: llama.cpp's timings and TGI's headers come unasked; SGLang's
// OpenAI API returns no per-request split (its native /generate's
// meta_info is not an API the gateway serves); TensorRT-LLM's request
// schema forbids any field it does not know (a 400), and its per-request
// records come only from GET /perf_metrics, which the gateway passes
// through for the client to join (reading them here would take them
// from that client); Ollama's OpenAI endpoint gives none.
var askFields = map[string]string{latency.EngineVLLM: "include_metrics", latency.EngineTokentrace: "return_metrics"}

// askEngine is the body an attempt sends to its replica: the client's,
// unless the pool asks for evidence (evidence: ask), the replica's kind
// has a field that asks for a per-request metrics object (askFields),
// the API is chat or completions and the client did not ask itself. Then
// it carries that field as true and, on a stream whose client did not ask
// for usage, stream_options.include_usage (vLLM and tokentrace serve put
// the object on the final usage chunk); a marks what it added, which the
// relay keeps from the client (stripEvidence). The client's own
// stream_options are replaced only when they did not ask for usage.
func (x *exchange) askEngine(p *pool, a *attempt, body []byte) []byte {
	field := askFields[a.rep.cfg.Kind]
	if p.cfg.Evidence != EvidenceAsk || field == "" || x.req.AskedMetrics ||
		(x.api != openai.APIChat && x.api != openai.APICompletions) {
		return body
	}
	set := map[string]any{field: true}
	if x.req.Stream && !x.req.IncludeUsage {
		set["stream_options"] = map[string]bool{"include_usage": true}
	}
	b, err := rewriteFields(body, set)
	if err != nil {
		return body // scanned already: not reached
	}
	a.askedMetrics, a.askedUsage = true, len(set) > 1
	return b
}

// stripEvidence is an event's data (or a whole answer) less what the
// gateway asked for and the client did not: nil to drop the event (the
// final usage chunk a stream's client did not ask for), the "metrics"
// member taken out, else data itself.
func (a *attempt) stripEvidence(data []byte, c *openai.ChunkInfo) []byte {
	switch {
	case a.askedUsage && c.HasUsage && c.Choices == 0 && !c.Typed && !c.Native:
		return nil
	case a.askedMetrics && c.Metrics != nil:
		return withoutMember(data, "metrics")
	}
	return data
}

// withoutMember is the JSON object obj without its top-level members
// named key (exactly), every other byte kept; obj itself when it has none
// or is no object.
func withoutMember(obj []byte, key string) []byte {
	for {
		s := newScanner(obj)
		keyAt, valEnd, prevEnd, lastEnd := -1, -1, -1, -1
		err := s.Object(func(k jsonscan.Str) error {
			at := k.Start - 1 // its opening quote
			if err := s.skip(); err != nil {
				return err
			}
			if keyAt < 0 && !k.Escaped && string(k.Raw) == key {
				keyAt, valEnd, prevEnd = at, s.Pos(), lastEnd
			}
			lastEnd = s.Pos()
			return nil
		})
		if err != nil || keyAt < 0 {
			return obj
		}
		out := make([]byte, 0, len(obj))
		if prevEnd >= 0 {
			// After an earlier member: from its end (the comma) on.
			out = append(append(out, obj[:prevEnd]...), obj[valEnd:]...)
		} else {
			// The first member: through the comma that follows it.
			rest := bytes.TrimLeft(obj[valEnd:], " \t\r\n")
			if len(rest) > 0 && rest[0] == ',' {
				rest = bytes.TrimLeft(rest[1:], " \t\r\n")
			}
			out = append(append(out, obj[:keyAt]...), rest...)
		}
		obj = out
	}
}

// noteEvidence keeps the engine split one event (or a whole answer's
// body, read as a chunk) carries, when no earlier evidence of higher
// precedence was kept, and its usage's prompt_tokens (the key's token
// settlement, settleTokens).
func (x *exchange) noteEvidence(c *openai.ChunkInfo) {
	if c.HasUsage && c.HasPrompt && c.PromptTokens > 0 {
		x.promptTokens = int32(min(c.PromptTokens, math.MaxInt32))
	}
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
	x.tl.engine = uint8(max(slices.Index(evidenceEngines, sp.Engine), 0))
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
