package latency

import (
	"math"
)

// SplitFromMetrics reads a server's per-request metrics object (the
// "metrics" member some servers put on an answer or its final chunk), in
// one of three forms, told apart by their keys (exact):
//
//   - tokentrace's: queue_time_ms, prefill_time_ms, generation_time_ms,
//     with arrival_time and frontend_time_ms for the first scheduled
//     instant;
//   - vLLM's merged per-request metrics (--enable-per-request-metrics):
//     queue_time_ms, time_to_first_token_ms (first scheduled → first
//     token), generation_time_ms (first → last token), any of them null
//     (ParseVLLMRequestMetrics);
//   - vLLM's older RequestMetrics: time_in_queue in seconds and
//     first_scheduled_time, first_token_time, last_token_time as instants
//     in seconds.
//
// It returns nil when raw holds none of them.
func SplitFromMetrics(raw []byte) *ServerSplit {
	m, ok := numbers(raw)
	if !ok {
		return nil
	}
	if _, ok := m["prefill_time_ms"]; ok {
		return tokentraceMetrics(m)
	}
	if v, ok := vllmRequestMetrics(m); ok {
		return v.Split()
	}
	return requestMetrics(m)
}

// tokentraceMetrics is the split of tokentrace's metrics object.
func tokentraceMetrics(m map[string]float64) *ServerSplit {
	q, ok := m["queue_time_ms"]
	if !ok || !nonNegative(q, m["prefill_time_ms"], m["generation_time_ms"], m["frontend_time_ms"]) {
		return nil
	}
	sp := &ServerSplit{QueueNS: msNS(q), PrefillNS: msNS(m["prefill_time_ms"]),
		DecodeNS: msNS(m["generation_time_ms"]), Source: SourceVLLMMetrics, Engine: EngineTokentrace}
	if at, ok := m["arrival_time"]; ok && at > 0 && instant(at) {
		sp.FirstScheduledUnixNS = unixNS(at) + msNS(m["frontend_time_ms"]+q)
	}
	return sp
}

// requestMetrics is the split of vLLM's older RequestMetrics fields.
func requestMetrics(m map[string]float64) *ServerSplit {
	fs, okS := m["first_scheduled_time"]
	ft, okT := m["first_token_time"]
	q, ok := m["time_in_queue"]
	if !ok || !okS || !okT || !seconds(q, ft-fs) || !instant(fs, ft) {
		return nil
	}
	sp := &ServerSplit{QueueNS: secNS(q), PrefillNS: secNS(ft - fs), Source: SourceVLLMMetrics, Engine: EngineVLLM, FirstScheduledUnixNS: unixNS(fs)}
	if lt, ok := m["last_token_time"]; ok && seconds(lt-ft) && instant(lt) {
		sp.DecodeNS = secNS(lt - ft)
	}
	return sp
}

// VLLMRequestMetrics is vLLM's merged per-request "metrics" object, which
// a server started with --enable-per-request-metrics puts on a whole
// answer and on a stream's final usage chunk (asked for with
// "include_metrics": true in the request body where the version wants it):
// docs/features/per_request_metrics.md of vLLM. Times are milliseconds; a
// field the object gives as null (or lacks) is -1.
type VLLMRequestMetrics struct {
	// QueueMS is the wait in the scheduler's queue before processing
	// began (queue_time_ms).
	QueueMS float64
	// TTFTMS is time_to_first_token_ms: from the request first scheduled
	// to its first output token. vLLM names it time to first token; it
	// starts after the queue wait, so it is the prefill with whatever
	// else the scheduled request waited for (other requests' steps).
	TTFTMS float64
	// GenerationMS is generation_time_ms: first output token to last.
	GenerationMS float64
	// MeanITLMS is mean_itl_ms (null for a one-token answer);
	// TokensPerSecond tokens_per_second.
	MeanITLMS, TokensPerSecond float64
}

// ParseVLLMRequestMetrics reads vLLM's merged per-request metrics object.
// Keys are exact; ok is false when raw is not an object holding
// queue_time_ms and time_to_first_token_ms as non-negative numbers, or
// when it holds prefill_time_ms (tokentrace's form).
func ParseVLLMRequestMetrics(raw []byte) (VLLMRequestMetrics, bool) {
	m, ok := numbers(raw)
	if !ok {
		return VLLMRequestMetrics{}, false
	}
	if _, ok := m["prefill_time_ms"]; ok {
		return VLLMRequestMetrics{}, false
	}
	return vllmRequestMetrics(m)
}

func vllmRequestMetrics(m map[string]float64) (VLLMRequestMetrics, bool) {
	q, ok1 := m["queue_time_ms"]
	t, ok2 := m["time_to_first_token_ms"]
	if !ok1 || !ok2 || !nonNegative(q, t) {
		return VLLMRequestMetrics{}, false
	}
	opt := func(k string) float64 {
		v, ok := m[k]
		if !ok || !nonNegative(v) {
			return -1
		}
		return v
	}
	return VLLMRequestMetrics{QueueMS: q, TTFTMS: t, GenerationMS: opt("generation_time_ms"),
		MeanITLMS: opt("mean_itl_ms"), TokensPerSecond: opt("tokens_per_second")}, true
}

// Split is the server split vLLM's merged metrics give: the queue wait
// exactly; prefill taken as time_to_first_token_ms, which vLLM counts
// from the request first scheduled (so the split lists prefill in
// Derived); decode as generation_time_ms, or unreported when that is
// null.
func (v VLLMRequestMetrics) Split() *ServerSplit {
	sp := &ServerSplit{QueueNS: msNS(v.QueueMS), PrefillNS: msNS(v.TTFTMS), Source: SourceVLLMMetrics,
		Engine: EngineVLLM, Derived: []string{SplitPrefill}}
	if v.GenerationMS >= 0 {
		sp.DecodeNS = msNS(v.GenerationMS)
	} else {
		sp.Unreported = []string{SplitDecode}
	}
	return sp
}

// nonNegative says whether every v is a finite number ≥ 0 and below
// 10^12 (milliseconds or seconds: far past any request's length, and
// within int64 nanoseconds).
func nonNegative(vs ...float64) bool {
	for _, v := range vs {
		if !(v >= 0) || v >= 1e12 {
			return false
		}
	}
	return true
}

// seconds says whether every v is a finite number of seconds ≥ 0 and
// below 10^9 (within int64 nanoseconds).
func seconds(vs ...float64) bool {
	for _, v := range vs {
		if !(v >= 0) || v >= 1e9 {
			return false
		}
	}
	return true
}

// instant says whether every v is a Unix instant in seconds that int64
// nanoseconds hold (before the year 2262).
func instant(vs ...float64) bool {
	for _, v := range vs {
		if !(v >= 0) || v >= 9e9 {
			return false
		}
	}
	return true
}

// secNS converts seconds to nanoseconds, rounded.
func secNS(v float64) int64 { return int64(math.Round(v * 1e9)) }

// unixNS converts Unix seconds to nanoseconds without the float64 product
// (whose step is 256 ns at today's instants): whole seconds and the
// fraction apart.
func unixNS(s float64) int64 {
	whole, frac := math.Modf(s)
	return int64(whole)*1e9 + int64(math.Round(frac*1e9))
}
