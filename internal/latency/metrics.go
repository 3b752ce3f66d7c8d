package latency

import (
	"encoding/json"
	"math"
	"strconv"
)

// SplitFromMetrics reads a server's per-request metrics object (the
// "metrics" member some servers put on an answer or its final chunk):
// tokentrace's (queue_time_ms, prefill_time_ms, generation_time_ms, with
// arrival_time and frontend_time_ms for the first scheduled instant) or
// vLLM's RequestMetrics fields (time_in_queue in seconds,
// first_scheduled_time, first_token_time, last_token_time as instants in
// seconds). Keys are exact. It returns nil when raw holds neither form.
func SplitFromMetrics(raw []byte) *ServerSplit {
	var m map[string]float64
	if json.Unmarshal(raw, &m) != nil {
		// Fields of other types: decode number by number.
		var any map[string]json.RawMessage
		if json.Unmarshal(raw, &any) != nil {
			return nil
		}
		m = map[string]float64{}
		for k, v := range any {
			if f, err := strconv.ParseFloat(string(v), 64); err == nil {
				m[k] = f
			}
		}
	}
	ms := func(v float64) int64 { return int64(math.Round(v * 1e6)) }
	sec := func(v float64) int64 { return int64(math.Round(v * 1e9)) }
	if q, ok := m["queue_time_ms"]; ok {
		sp := &ServerSplit{QueueNS: ms(q), PrefillNS: ms(m["prefill_time_ms"]),
			DecodeNS: ms(m["generation_time_ms"]), Source: SourceVLLMMetrics, Engine: EngineTokentrace}
		if at, ok := m["arrival_time"]; ok && at > 0 {
			sp.FirstScheduledUnixNS = unixNS(at) + ms(m["frontend_time_ms"]+q)
		}
		return sp
	}
	fs, okS := m["first_scheduled_time"]
	ft, okT := m["first_token_time"]
	q, ok := m["time_in_queue"]
	if !ok || !okS || !okT {
		return nil
	}
	sp := &ServerSplit{QueueNS: sec(q), PrefillNS: sec(ft - fs), Source: SourceVLLMMetrics, Engine: EngineVLLM, FirstScheduledUnixNS: unixNS(fs)}
	if lt, ok := m["last_token_time"]; ok && lt >= ft {
		sp.DecodeNS = sec(lt - ft)
	}
	return sp
}

// unixNS converts Unix seconds to nanoseconds without the float64 product
// (whose step is 256 ns at today's instants): whole seconds and the
// fraction apart.
func unixNS(s float64) int64 {
	whole, frac := math.Modf(s)
	return int64(whole)*1e9 + int64(math.Round(frac*1e9))
}
