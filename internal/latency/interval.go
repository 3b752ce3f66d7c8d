package latency

import "time"

// Consecutive returns the durations between consecutive instants of a
// request, from start: each instant's time since the last one reached. An
// instant not reached (zero) or before the last reached collapses onto it
// (0), so the durations always sum to the last reached instant − start: a
// hop's stages partition its time whatever point the request got to.
func Consecutive(start time.Time, instants ...time.Time) []time.Duration {
	out := make([]time.Duration, len(instants))
	last := start
	for i, x := range instants {
		if x.IsZero() || x.Before(last) {
			continue
		}
		out[i] = x.Sub(last)
		last = x
	}
	return out
}
