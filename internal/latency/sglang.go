package latency

import (
	"encoding/json"
)

// SourceSGLangMetaInfo is SGLang's per-request "meta_info" object on a
// native /generate answer (SplitFromSGLangMetaInfo).
const SourceSGLangMetaInfo = "sglang-meta-info"

// EngineSGLang is SGLang's server.
const EngineSGLang = "sglang"

// SGLangMetaInfo is the timing part of SGLang's "meta_info" object, which
// its native /generate puts on an answer (and on a stream's last event)
// when the server runs with --enable-metrics. Durations are seconds,
// instants Unix seconds of the front end's clock; a field the object
// lacks (or gives as null) is -1.
type SGLangMetaInfo struct {
	// QueueTime is queue_time: the wait in the scheduler's waiting queue
	// (forward entry − waiting-queue entry).
	QueueTime float64
	// InferenceTime is inference_time: from the forward entry (the
	// request first scheduled) to the front end seeing it finished.
	InferenceTime float64
	// E2ELatency is e2e_latency: the front end's whole time on the
	// request.
	E2ELatency float64
	// ReceivedTS, PrefillFinishedTS and DecodeFinishedTS are
	// request_received_ts, prefill_finished_ts (the front end's first
	// token) and decode_finished_ts (its last).
	ReceivedTS, PrefillFinishedTS, DecodeFinishedTS float64
	// PromptTokens, CompletionTokens and CachedTokens are the counts
	// (-1 when absent).
	PromptTokens, CompletionTokens, CachedTokens int
}

// ParseSGLangMetaInfo reads SGLang's meta_info object. Keys are exact;
// ok is false when raw is not an object holding queue_time,
// prefill_finished_ts and decode_finished_ts as ordered non-negative
// numbers (a server without --enable-metrics sends only counts).
func ParseSGLangMetaInfo(raw []byte) (SGLangMetaInfo, bool) {
	m, ok := numbers(raw)
	if !ok {
		return SGLangMetaInfo{}, false
	}
	q, ok1 := m["queue_time"]
	pf, ok2 := m["prefill_finished_ts"]
	df, ok3 := m["decode_finished_ts"]
	if !ok1 || !ok2 || !ok3 || !seconds(q, df-pf) || !instant(pf, df) {
		return SGLangMetaInfo{}, false
	}
	opt := func(k string, ok func(...float64) bool) float64 {
		if v, has := m[k]; has && ok(v) {
			return v
		}
		return -1
	}
	count := func(k string) int {
		if v, has := m[k]; has && v >= 0 && v <= 1<<31-1 && v == float64(int(v)) {
			return int(v)
		}
		return -1
	}
	return SGLangMetaInfo{QueueTime: q, InferenceTime: opt("inference_time", seconds), E2ELatency: opt("e2e_latency", seconds),
		ReceivedTS: opt("request_received_ts", instant), PrefillFinishedTS: pf, DecodeFinishedTS: df,
		PromptTokens: count("prompt_tokens"), CompletionTokens: count("completion_tokens"), CachedTokens: count("cached_tokens")}, true
}

// Split is the server split SGLang's meta_info gives: the queue wait
// exactly (queue_time); decode as decode_finished_ts −
// prefill_finished_ts, the front end's first and last token; prefill as
// inference_time less that decode (the request first scheduled to its
// first token seen by the front end), or, without inference_time, as
// prefill_finished_ts − request_received_ts − queue_time (which holds the
// front end's tokenizing too). Prefill and decode are front-end instants,
// so both are listed in Derived; with neither inference_time nor
// request_received_ts, prefill is unreported.
func (s SGLangMetaInfo) Split() *ServerSplit {
	// Unix seconds as float64 step by about 0.24 µs today: instants are
	// taken to the microsecond.
	first, decode := usNS(s.PrefillFinishedTS), usNS(s.DecodeFinishedTS)-usNS(s.PrefillFinishedTS)
	queue := secNS(s.QueueTime)
	sp := &ServerSplit{QueueNS: queue, DecodeNS: decode, Source: SourceSGLangMetaInfo,
		Engine: EngineSGLang, Derived: []string{SplitPrefill, SplitDecode}}
	switch {
	case s.InferenceTime >= 0 && secNS(s.InferenceTime) >= decode:
		sp.PrefillNS = secNS(s.InferenceTime) - decode
	case s.ReceivedTS >= 0 && first-usNS(s.ReceivedTS)-queue >= 0:
		sp.PrefillNS = first - usNS(s.ReceivedTS) - queue
	default:
		sp.Derived = []string{SplitDecode}
		sp.Unreported = []string{SplitPrefill}
	}
	return sp
}

// SplitFromSGLangMetaInfo is the split of a native /generate answer (or
// stream event) that carries a meta_info object with SGLang's timing
// fields; nil otherwise.
func SplitFromSGLangMetaInfo(answer []byte) *ServerSplit {
	var a struct {
		MetaInfo json.RawMessage `json:"meta_info"`
	}
	if json.Unmarshal(answer, &a) != nil || a.MetaInfo == nil {
		return nil
	}
	mi, ok := ParseSGLangMetaInfo(a.MetaInfo)
	if !ok {
		return nil
	}
	return mi.Split()
}

// usNS is a Unix instant in seconds as nanoseconds, to the microsecond.
func usNS(s float64) int64 { return (unixNS(s) + 500) / 1000 * 1000 }
