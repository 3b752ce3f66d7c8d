package latency

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseServerTiming reads Server-Timing values ("queue;dur=12.5, prefill;
// dur=40") into metric name → duration. Names are lower-cased; entries without
// a valid, non-negative dur (milliseconds) are skipped; a later value for a
// name replaces an earlier one, so a trailer overrides a header.
func ParseServerTiming(values []string) map[string]time.Duration {
	out := make(map[string]time.Duration, 4)
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			fields := strings.Split(part, ";")
			name := strings.ToLower(strings.TrimSpace(fields[0]))
			if name == "" {
				continue
			}
			for _, f := range fields[1:] {
				k, val, ok := strings.Cut(strings.TrimSpace(f), "=")
				if !ok || !strings.EqualFold(strings.TrimSpace(k), "dur") {
					continue
				}
				ms, err := strconv.ParseFloat(strings.Trim(strings.TrimSpace(val), `"`), 64)
				if err != nil || ms < 0 || ms > 1e9 || math.IsNaN(ms) {
					continue
				}
				out[name] = time.Duration(ms * 1e6)
			}
		}
	}
	return out
}

// SplitServerTiming reads a server's own split from its Server-Timing
// values: tokentrace serve names the stages queue, prefill and decode. A
// tokentrace gateway on the path adds its own stages (gateway_in, queue,
// connect, post_process, backpressure), names the server's queue
// server_queue and, when it knows it, the server's decode server_decode; the gateway's stages then sum
// to gateway. ok is false when neither a server queue nor prefill is present.
func SplitServerTiming(values []string) (s ServerSplit, gateway time.Duration, ok bool) {
	m := ParseServerTiming(values)
	q, okq := m["queue"]
	decode := m["decode"]
	if _, behind := m["gateway_in"]; behind {
		gateway = m["gateway_in"] + m["queue"] + m["connect"] + m["post_process"] + m["backpressure"]
		q, okq = m["server_queue"]
		if d, ok := m["server_decode"]; ok {
			decode = d
		}
	} else if !okq {
		q, okq = m["server_queue"]
	}
	p, okp := m["prefill"]
	if !okq && !okp {
		return ServerSplit{}, gateway, false
	}
	return ServerSplit{QueueNS: int64(q), PrefillNS: int64(p), DecodeNS: int64(decode), Source: "server-timing"}, gateway, true
}
