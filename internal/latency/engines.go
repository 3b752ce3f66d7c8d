package latency

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// What a ServerSplit was read from (ServerSplit.Source): the evidence a
// server gave about one request.
const (
	// SourceServerTiming is a Server-Timing header or trailer
	// (tokentrace's stage names; SplitServerTiming).
	SourceServerTiming = "server-timing"
	// SourceVLLMMetrics is a per-request "metrics" object: vLLM's
	// RequestMetrics or tokentrace's form of it (SplitFromMetrics).
	SourceVLLMMetrics = "vllm-metrics"
	// SourceLlamaCppTimings is llama.cpp's "timings" object on an answer
	// or its last stream chunk (SplitFromLlamaCppTimings).
	SourceLlamaCppTimings = "llamacpp-timings"
	// SourceTGIHeaders is Text Generation Inference's x-queue-time,
	// x-inference-time … response headers (SplitFromTGIHeaders).
	SourceTGIHeaders = "tgi-headers"
	// SourceOllamaDurations is Ollama's prompt_eval_duration,
	// eval_duration … fields of a native answer (SplitFromOllama).
	SourceOllamaDurations = "ollama-durations"
)

// The engines a ServerSplit names (ServerSplit.Engine): the server whose
// own evidence it is, when the evidence says.
const (
	EngineTokentrace = "tokentrace"
	EngineVLLM       = "vllm"
	EngineLlamaCpp   = "llamacpp"
	EngineTGI        = "tgi"
	EngineOllama     = "ollama"
)

// The server stages a ServerSplit may leave unreported
// (ServerSplit.Unreported).
const (
	SplitQueue   = "queue"
	SplitPrefill = "prefill"
	SplitDecode  = "decode"
)

// LlamaCppTimings is llama.cpp's per-request "timings" object, as
// llama-server puts it on a non-streamed answer and on the last chunk of a
// stream (tools/server/server-task.cpp, result_timings::to_json). Counts
// are tokens, times milliseconds; a count the object lacks is -1.
type LlamaCppTimings struct {
	// CacheN is how many prompt tokens the slot's KV cache already held
	// (not computed again); PromptN how many were computed; PromptMS the
	// time from the slot starting on the prompt to the first token
	// sampled.
	CacheN, PromptN int
	PromptMS        float64
	// PredictedN is how many tokens were generated; PredictedMS the time
	// from the first token sampled to the last.
	PredictedN  int
	PredictedMS float64
}

// ParseLlamaCppTimings reads llama.cpp's "timings" object. Keys are exact;
// ok is false when raw is not an object holding prompt_ms and
// predicted_ms as non-negative numbers.
func ParseLlamaCppTimings(raw []byte) (t LlamaCppTimings, ok bool) {
	m, ok := numbers(raw)
	if !ok {
		return LlamaCppTimings{}, false
	}
	pms, ok1 := m["prompt_ms"]
	dms, ok2 := m["predicted_ms"]
	if !ok1 || !ok2 || !(pms >= 0) || !(dms >= 0) || math.IsInf(pms, 0) || math.IsInf(dms, 0) {
		return LlamaCppTimings{}, false
	}
	count := func(k string) int {
		v, ok := m[k]
		if !ok || !(v >= 0) || v > math.MaxInt32 {
			return -1
		}
		return int(v)
	}
	return LlamaCppTimings{CacheN: count("cache_n"), PromptN: count("prompt_n"), PromptMS: pms,
		PredictedN: count("predicted_n"), PredictedMS: dms}, true
}

// Split is the server split llama.cpp's timings give: prefill is
// prompt_ms, decode predicted_ms. llama.cpp reports no queue wait (the
// time a request waited for a free slot): the split says so in
// Unreported, and QueueNS is 0.
func (t LlamaCppTimings) Split() *ServerSplit {
	return &ServerSplit{PrefillNS: msNS(t.PromptMS), DecodeNS: msNS(t.PredictedMS),
		Source: SourceLlamaCppTimings, Engine: EngineLlamaCpp, Unreported: []string{SplitQueue}}
}

// SplitFromLlamaCppTimings is ParseLlamaCppTimings(raw).Split(), nil when
// raw holds no timings.
func SplitFromLlamaCppTimings(raw []byte) *ServerSplit {
	t, ok := ParseLlamaCppTimings(raw)
	if !ok {
		return nil
	}
	return t.Split()
}

// TGIHeaders are the timing headers Text Generation Inference sets on a
// non-streamed answer (router/src/server.rs, generate_internal): whole
// milliseconds. A stream's headers are sent before the times are known
// and carry none of them.
var TGIHeaders = []string{"x-total-time", "x-validation-time", "x-queue-time", "x-inference-time",
	"x-time-per-token", "x-prompt-tokens", "x-generated-tokens"}

// SplitFromTGIHeaders reads TGI's timing headers through get (an
// http.Header's Get, which matches names regardless of case, as HTTP
// does): x-queue-time is the queue wait, exact to the millisecond;
// x-inference-time is prefill and decode together, which TGI does not
// split (x-time-per-token is that time over the tokens generated), so the
// split gives it all as decode and lists prefill in Unreported. Nil when
// x-queue-time or x-inference-time is absent or not a whole number of
// milliseconds.
func SplitFromTGIHeaders(get func(name string) string) *ServerSplit {
	q, ok1 := wholeMS(get("x-queue-time"))
	inf, ok2 := wholeMS(get("x-inference-time"))
	if !ok1 || !ok2 {
		return nil
	}
	return &ServerSplit{QueueNS: q, DecodeNS: inf, Source: SourceTGIHeaders, Engine: EngineTGI,
		Unreported: []string{SplitPrefill}}
}

func wholeMS(v string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/int64(1e6) {
		return 0, false
	}
	return n * 1e6, true
}

// SplitFromOllama reads the durations of an Ollama answer (its native
// /api/chat and /api/generate, whose last object holds them; its
// OpenAI-compatible /v1 endpoints return none): prompt_eval_duration is
// prefill, eval_duration decode, load_duration the model's load (LoadNS),
// in nanoseconds. Ollama reports no queue wait (load_duration is not one).
// Keys are exact; nil when prompt_eval_duration or eval_duration is absent
// or negative (a negative or absent load_duration is left out).
func SplitFromOllama(raw []byte) *ServerSplit {
	m, ok := numbers(raw)
	if !ok {
		return nil
	}
	p, ok1 := m["prompt_eval_duration"]
	d, ok2 := m["eval_duration"]
	if !ok1 || !ok2 || !(p >= 0) || !(d >= 0) || p > math.MaxInt64/2 || d > math.MaxInt64/2 {
		return nil
	}
	sp := &ServerSplit{PrefillNS: int64(p), DecodeNS: int64(d), Source: SourceOllamaDurations,
		Engine: EngineOllama, Unreported: []string{SplitQueue}}
	if l, ok := m["load_duration"]; ok && l >= 0 && l <= math.MaxInt64/2 {
		sp.LoadNS = int64(l)
	}
	return sp
}

// numbers decodes a JSON object's numeric members (exact keys; members
// of other types are left out); ok is false when raw is no object.
func numbers(raw []byte) (map[string]float64, bool) {
	var all map[string]json.RawMessage
	if json.Unmarshal(raw, &all) != nil || all == nil {
		return nil, false
	}
	m := make(map[string]float64, len(all))
	for k, v := range all {
		if f, err := strconv.ParseFloat(string(v), 64); err == nil {
			m[k] = f
		}
	}
	return m, true
}

// msNS converts milliseconds to nanoseconds, rounded.
func msNS(v float64) int64 { return int64(math.Round(v * 1e6)) }

// Reports says whether the split gives a stage (SplitQueue, SplitPrefill,
// SplitDecode): the evidence it came from reports it.
func (s *ServerSplit) Reports(stage string) bool {
	for _, u := range s.Unreported {
		if u == stage {
			return false
		}
	}
	return true
}
