package window

import (
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// NoEnd is the failure kind of a record that claims success but has no
// end instant: it cannot be measured, and the report counts it failed.
const NoEnd latency.ErrorKind = "no_end"

// Window is one window's figures. Start and End are on the records'
// clock; End − Start is W except for the last window, which ends at the
// run's end.
type Window struct {
	Start, End time.Duration
	// Offered counts the requests whose intended send falls in the window;
	// Completed the successful ones that completed in it, Failed the
	// failed ones, and Failures those by kind.
	Offered, Completed, Failed int
	Failures                   map[latency.ErrorKind]int
	// OfferedRPS and AchievedRPS are Offered and Completed per second of
	// the window's span.
	OfferedRPS, AchievedRPS float64
	// InFlight is the time-average number of requests between their send
	// and their completion over the window.
	InFlight float64
	// The latency percentiles of the successful requests completed in the
	// window (ITL: every gap of those requests).
	TTFT, TPOT, ITL, E2E Percentiles
	// Gauges are the means of the server's samples taken in the window.
	Gauges Gauges
}

// Percentiles are the nearest-rank percentiles of a window's values
// (stats.Sample: exact up to its cap, Approx past it); zero when N is 0.
type Percentiles struct {
	N             int64
	P50, P90, P99 time.Duration
	Approx        bool
}

// Gauge is one scrape of the server's gauges, At on the records' clock.
type Gauge struct {
	At                        time.Duration
	Waiting, Running, KVUsage float64 // KVUsage a fraction, 0..1
}

// Gauges are the means of a window's scrapes; Samples is 0 when no scrape
// fell in the window.
type Gauges struct {
	Samples                   int
	Waiting, Running, KVUsage float64
}

// Index is the window of instant t for width w: ⌊t / w⌋, 0 for t < 0.
func Index(t, w time.Duration) int {
	if t <= 0 || w <= 0 {
		return 0
	}
	return int(t / w)
}

// Completion is the instant a record counts at: its end, or for a request
// that never ended the latest instant it recorded.
func Completion(r *latency.Record) time.Duration {
	if r.EndNS != 0 {
		return time.Duration(r.EndNS)
	}
	t := max(r.SentNS, r.WroteNS, r.FirstByteNS, r.FirstReasonNS, r.FirstTokenNS, r.LastEventNS)
	if n := len(r.ChunkNS); n > 0 {
		t = max(t, r.ChunkNS[n-1])
	}
	return time.Duration(t)
}

// percentiles reads p50, p90 and p99 of s.
func percentiles(s *stats.Sample) Percentiles {
	if s.Count() == 0 {
		return Percentiles{}
	}
	v, approx := s.Percentiles(50, 90, 99)
	return Percentiles{N: s.Count(), P50: time.Duration(v[0]), P90: time.Duration(v[1]),
		P99: time.Duration(v[2]), Approx: approx}
}
