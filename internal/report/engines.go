package report

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// evidenceName is the name a server split's evidence is counted under
// (Summary.ServerEvidence): its Source, with the engine when the source
// alone does not say (a metrics object is vLLM's or tokentrace's; a
// Server-Timing split a tokentrace gateway read from another engine's
// evidence is that engine's).
func evidenceName(s *latency.ServerSplit) string {
	if (s.Source == latency.SourceVLLMMetrics || s.Source == latency.SourceServerTiming && s.Engine != latency.EngineTokentrace) && s.Engine != "" {
		return s.Source + " (" + s.Engine + ")"
	}
	if s.Source == "" {
		return "unnamed"
	}
	return s.Source
}

// evidenceWords says in words what each kind of evidence gives.
var evidenceWords = map[string]string{
	latency.SourceServerTiming: "Server-Timing (queue, prefill and decode as the server timed them)",
	latency.SourceVLLMMetrics + " (vllm)": "vLLM's per-request metrics (queue_time_ms: queue, exact; " +
		"time_to_first_token_ms, from first scheduled to the first token: prefill, derived; generation_time_ms: decode; " +
		"or the older RequestMetrics instants)",
	latency.SourceVLLMMetrics + " (tokentrace)": "tokentrace's per-request metrics (queue_time_ms, prefill_time_ms, generation_time_ms)",
	latency.SourceLlamaCppTimings: "llama.cpp's per-request timings (prompt_ms: prompt processing to the first token; " +
		"predicted_ms: decode); llama.cpp reports no queue wait",
	latency.SourceTGIHeaders: "TGI's x-queue-time and x-inference-time headers (queue exact to the millisecond; " +
		"prefill and decode together, counted as decode)",
	latency.SourceOllamaDurations: "Ollama's prompt_eval_duration and eval_duration (prefill and decode); " +
		"Ollama reports no queue wait",
	latency.SourceTRTLLMPerfMetrics: "TensorRT-LLM's /perf_metrics records, joined by request id after the run " +
		"(queue, prefill and decode from its steady-clock instants; a KV-cache transfer as its own stage)",
	latency.SourceSGLangMetaInfo: "SGLang's meta_info (queue_time: queue, exact; prefill and decode from the " +
		"front end's instants, derived)",
	latency.SourceServerTiming + " (" + latency.EngineLlamaCpp + ")": "a tokentrace gateway's Server-Timing holding " +
		"llama.cpp's per-request timings (prefill: prompt_ms); llama.cpp reports no queue wait",
	latency.SourceServerTiming + " (" + latency.EngineTGI + ")": "a tokentrace gateway's Server-Timing holding " +
		"TGI's x-queue-time and x-inference-time (queue; prefill and decode together)",
	latency.SourceServerTiming + " (" + latency.EngineVLLM + ")": "a tokentrace gateway's Server-Timing holding " +
		"vLLM's per-request metrics (queue, prefill)",
}

// QueueInference is how the report put a number on the queue wait of
// requests whose server reports none (llama.cpp, Ollama): the time from
// the request written to the first token, less the gateway's time, the
// engine's prompt processing (and, for an answer that came whole, its
// decode), is the engine's queue wait plus a part that every request pays
// — HTTP, templating, tokenization, the network. That part is taken to be
// the least such gap of the run (the request that waited least waited
// about nothing); the rest of each request's gap is its queue wait.
type QueueInference struct {
	// Requests is how many successful requests had their queue inferred.
	Requests int `json:"requests"`
	// FloorMS is the least gap, left unattributed in every such request.
	FloorMS float64 `json:"floor_ms"`
	// Basis says how, in words.
	Basis string `json:"basis"`
}

// gapBeforeEngine is the time between the request written and its first
// token (its end, for a whole answer) that the server's split does not
// account for: the queue wait and the rest. A model load the engine
// reports (Ollama's load_duration) is accounted for: it is no queue wait.
func (r *row) gapBeforeEngine() int64 {
	wrote := r.wrote
	if wrote == 0 {
		wrote = r.sent + r.connect
	}
	g := r.firstOut() - wrote - r.gateway - r.prefill - r.load
	if r.firstTok == 0 {
		g -= r.decode // a whole answer: its decode came before its end too
	}
	return g
}

// inferQueue sets the queue wait of the successful requests whose
// server reports none (QueueInference) and says how; nil when there are
// none.
func (a *analysis) inferQueue() *QueueInference {
	floor, n := int64(-1), 0
	for _, i := range a.ok {
		r := &a.rows[i]
		if r.flags&flagQueueInferred == 0 {
			continue
		}
		g := max(r.gapBeforeEngine(), 0)
		if floor < 0 || g < floor {
			floor = g
		}
		n++
	}
	if n == 0 {
		return nil
	}
	for _, i := range a.ok {
		if r := &a.rows[i]; r.flags&flagQueueInferred != 0 {
			r.sq = max(r.gapBeforeEngine()-floor, 0)
		}
	}
	a.paths.inferredKeys()
	return &QueueInference{Requests: n, FloorMS: ms(floor), Basis: fmt.Sprintf(
		"the server reports no queue wait: each request's time from written to first token, less the engine's "+
			"prompt processing, is its queue wait plus what every request pays (HTTP, templating, tokenization, "+
			"network); that part is taken as the run's least such gap (%s) and left unattributed", fmtMS(ms(floor)))}
}

// evidenceNotes says which evidence the server split came from, and how
// much of the run had none.
func evidenceNotes(s Summary) []string {
	if s.Succeeded == 0 {
		return nil
	}
	var notes []string
	keys := make([]string, 0, len(s.ServerEvidence))
	for k := range s.ServerEvidence {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		if k == latency.SourceServerTiming {
			continue // tokentrace's own hops: the split the report's stages are named for
		}
		w := evidenceWords[k]
		if w == "" {
			w = k
		}
		parts = append(parts, fmt.Sprintf("%d of %d requests: %s", s.ServerEvidence[k], s.Succeeded, w))
	}
	if len(parts) > 0 {
		notes = append(notes, "server split from "+strings.Join(parts, "; "))
	}
	if q := s.QueueInferred; q != nil {
		notes = append(notes, fmt.Sprintf("queue wait inferred on %d requests: %s", q.Requests, q.Basis))
	}
	return notes
}

// family is the engine whose vocabulary the advice speaks: the engine the
// evidence names, or, for tokentrace's simulated engine, the family it
// simulates (its tokentrace:scheduler_config_info engine_family, as
// bench --sim-engine llamacpp; a simulated run's run.json engine_family):
// a llama.cpp twin is advised in -b and -np, never in vLLM's names.
func (a *analysis) family() string {
	e := a.engine()
	if e != latency.EngineTokentrace && e != "" {
		return e
	}
	f, ok := "", false
	if a.ev != nil {
		f, ok = a.ev.setting("engine_family")
	}
	if !ok && len(a.runs) > 0 && a.runs[0].Simulated { // simulate --engine: run.json says which
		f, ok = a.runs[0].EngineFamily, a.runs[0].EngineFamily != ""
	}
	if !ok {
		return e
	}
	f, _, _ = strings.Cut(f, "@")
	return f
}

// engine is the engine the run's evidence names: its /metrics' (run.json),
// else its per-request evidence's when all of it names one engine; "" when
// unknown.
func (a *analysis) engine() string {
	if a.ev != nil && a.ev.engine != "" {
		return a.ev.engine
	}
	name := ""
	for k := range a.evidence {
		e := ""
		switch {
		case k == latency.SourceLlamaCppTimings:
			e = latency.EngineLlamaCpp
		case k == latency.SourceTGIHeaders:
			e = latency.EngineTGI
		case k == latency.SourceOllamaDurations:
			e = latency.EngineOllama
		case strings.HasPrefix(k, latency.SourceVLLMMetrics+" ("):
			e = strings.TrimSuffix(strings.TrimPrefix(k, latency.SourceVLLMMetrics+" ("), ")")
		case strings.HasPrefix(k, latency.SourceServerTiming+" ("):
			e = strings.TrimSuffix(strings.TrimPrefix(k, latency.SourceServerTiming+" ("), ")")
		}
		if e == "" || (name != "" && e != name) {
			return ""
		}
		name = e
	}
	return name
}

// slotQueueing describes, for a llama.cpp server, why requests wait: it
// decodes at most its -np slots at once and defers the rest, quoting its
// /metrics where bench scraped them and the timings' split of TTFT.
func (a *analysis) slotQueueing(tail *StageGroup) string {
	ev := " llama.cpp runs at most its slots' worth of requests at once (-np) and defers the rest until a slot frees"
	if a.ev.has("running") && a.ev.runningPeak > 0 {
		ev += fmt.Sprintf(": llamacpp:requests_processing peaked at %s", num0(a.ev.runningPeak))
		if a.ev.has("waiting") {
			ev += fmt.Sprintf(" and llamacpp:requests_deferred at %s", num0(a.ev.waitingPeak))
		}
	}
	ev += "."
	if a.ev.has(figEngineTime) && a.ev.genTokens > 0 {
		// Each slot's generation time counts every step it waited on,
		// so the sum per token is the step time a request saw.
		ev += fmt.Sprintf(" Its counters give %.2f ms per generated token (llamacpp:tokens_predicted_seconds_total "+
			"over llamacpp:tokens_predicted_total, summed over slots decoding together): each request holds its slot "+
			"for about its answer's length times that.", 1e3*a.ev.genSeconds/a.ev.genTokens)
	}
	if tail != nil && a.queue != nil {
		ev += fmt.Sprintf(" In the tail, llama.cpp's own prompt processing (timings.prompt_ms) is %s of %s; the "+
			"wait before it is %s (inferred: llama.cpp reports no queue wait; %s left unattributed as every "+
			"request's HTTP, templating and tokenization).", fmtMS(tail.meanMS(latency.StagePrefill)), fmtMS(tail.TotalMS),
			fmtMS(tail.meanMS(latency.StageServerQueue)), fmtMS(a.queue.FloorMS))
	}
	return ev
}
