package latency

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
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
	var top map[string]json.RawMessage
	if json.Unmarshal(answer, &top) != nil || top["meta_info"] == nil {
		return nil
	}
	mi, ok := ParseSGLangMetaInfo(top["meta_info"])
	if !ok {
		return nil
	}
	return mi.Split()
}

// usNS is a Unix instant in seconds as nanoseconds, to the microsecond.
func usNS(s float64) int64 { return (unixNS(s) + 500) / 1000 * 1000 }

// SGLangOutput is one object of SGLang's native /generate answer: a whole
// answer, or one event of its stream ({"text", "output_ids",
// "meta_info"}, or {"error": {"message"}}).
type SGLangOutput struct {
	// Text is "text": the output so far (a stream's events carry it
	// whole unless the server runs with --incremental-streaming-output).
	Text string
	// Finish is meta_info's finish_reason "type", "" while the request
	// runs (finish_reason null).
	Finish string
	// PromptTokens, CompletionTokens and CachedTokens are meta_info's
	// counts, -1 when absent.
	PromptTokens, CompletionTokens, CachedTokens int
	// Error is the message of an error object; nothing else is set then.
	Error string
	// Split is meta_info's timing split (SGLangMetaInfo.Split), nil when
	// it carries none (a server without --enable-metrics, or an event
	// before the last).
	Split *ServerSplit
}

// maxSGLangOutput bounds one object ParseSGLangOutput reads.
const maxSGLangOutput = 64 << 20

// ParseSGLangOutput reads one object of SGLang's native /generate answer.
// Keys are exact (a JSON object's members by their exact names); it is an
// error when b is not an object, or holds neither an error object nor a
// meta_info object, or when text, finish_reason or the error's message is
// of another type.
func ParseSGLangOutput(b []byte) (SGLangOutput, error) {
	o := SGLangOutput{PromptTokens: -1, CompletionTokens: -1, CachedTokens: -1}
	if len(b) > maxSGLangOutput {
		return o, fmt.Errorf("SGLang answer over %d bytes", maxSGLangOutput)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil || top == nil {
		return o, errors.New("SGLang answer is not a JSON object")
	}
	if raw, ok := top["error"]; ok {
		var e map[string]json.RawMessage
		if json.Unmarshal(raw, &e) != nil || e == nil || json.Unmarshal(e["message"], &o.Error) != nil || o.Error == "" {
			return o, errors.New(`SGLang answer: "error" is not an object with a "message" string`)
		}
		return o, nil
	}
	raw, ok := top["meta_info"]
	var mi map[string]json.RawMessage
	if !ok || json.Unmarshal(raw, &mi) != nil || mi == nil {
		return o, errors.New(`SGLang answer has no "meta_info" object`)
	}
	if t, ok := top["text"]; ok && json.Unmarshal(t, &o.Text) != nil {
		return o, errors.New(`SGLang answer: "text" is not a string`)
	}
	if f, ok := mi["finish_reason"]; ok && string(f) != "null" {
		var fr map[string]json.RawMessage
		if json.Unmarshal(f, &fr) != nil || fr == nil || json.Unmarshal(fr["type"], &o.Finish) != nil {
			return o, errors.New(`SGLang answer: meta_info "finish_reason" is neither null nor an object with a "type" string`)
		}
	}
	if m, ok := ParseSGLangMetaInfo(raw); ok {
		o.Split = m.Split()
	}
	o.PromptTokens, o.CompletionTokens, o.CachedTokens = jsonCount(mi["prompt_tokens"]), jsonCount(mi["completion_tokens"]), jsonCount(mi["cached_tokens"])
	return o, nil
}

// jsonCount is a JSON count (a whole number from 0 to 2³¹ − 1), -1 for any
// other value or none.
func jsonCount(raw json.RawMessage) int {
	v, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || v < 0 || v > 1<<31-1 || v != math.Trunc(v) {
		return -1
	}
	return int(v)
}
