package latency

import "time"

// Consecutive returns the durations between consecutive instants of a
// request, from start: each instant's time since the last one reached. An
// instant not reached (zero) or before the last reached collapses onto it
// (0), so the durations always sum to the last reached instant − start: a
// hop's stages partition its time whatever point the request got to.
func Consecutive(start time.Time, instants ...time.Time) []time.Duration {
	return AppendConsecutive(make([]time.Duration, 0, len(instants)), start, instants...)
}

// AppendConsecutive appends Consecutive's durations to dst: with dst on
// the caller's stack, a hot path computes them without allocating.
func AppendConsecutive(dst []time.Duration, start time.Time, instants ...time.Time) []time.Duration {
	last := start
	for _, x := range instants {
		if x.IsZero() || x.Before(last) {
			dst = append(dst, 0)
			continue
		}
		dst = append(dst, x.Sub(last))
		last = x
	}
	return dst
}
