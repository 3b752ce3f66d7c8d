package serve

import (
	"time"

	"github.com/tokentrace/tokentrace/internal/stats"
)

// Lateness is a lock-free histogram of chunk write lateness (the engine
// event's instant to the chunk written and flushed), in internal/stats's
// buckets: exact below 1,024 ns, then within 0.05 %. Safe for concurrent
// use.
type Lateness struct {
	h stats.Concurrent
}

// Observe records one chunk's lateness (negative values count as 0).
func (l *Lateness) Observe(d time.Duration) { l.h.Add(int64(d)) }

// Count is the number of observations.
func (l *Lateness) Count() int64 { return l.h.Count() }

// Mean is the mean lateness.
func (l *Lateness) Mean() time.Duration {
	n := l.h.Count()
	if n == 0 {
		return 0
	}
	return time.Duration(l.h.Sum() / n)
}

// Max is the largest lateness observed.
func (l *Lateness) Max() time.Duration { return time.Duration(l.h.Max()) }

// Quantile returns the nearest-rank q-quantile (0 < q ≤ 1), the
// percentile 100·q as internal/stats reads it from the histogram: within
// 0.05 % of the observation of that rank, exact for the largest.
func (l *Lateness) Quantile(q float64) time.Duration {
	return time.Duration(l.h.Snapshot(nil).Percentile(q * 100))
}

// Reset clears the histogram (not atomically with concurrent Observe).
func (l *Lateness) Reset() { l.h.Reset() }
