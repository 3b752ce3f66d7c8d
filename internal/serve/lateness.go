package serve

import (
	"math"
	"sync/atomic"
	"time"
)

// Lateness buckets: 10 µs wide up to 10 ms, then 100 µs wide up to 2 s;
// later values land in an overflow bucket.
const (
	fineBucket   = 10 * time.Microsecond
	fineBuckets  = 1000
	coarseBucket = 100 * time.Microsecond
	lateBuckets  = fineBuckets + 19900
)

func lateIndex(d time.Duration) int {
	if d < fineBuckets*fineBucket {
		return int(d / fineBucket)
	}
	return min(fineBuckets+int((d-fineBuckets*fineBucket)/coarseBucket), lateBuckets)
}

func lateUpper(i int) time.Duration {
	if i < fineBuckets {
		return time.Duration(i+1) * fineBucket
	}
	return fineBuckets*fineBucket + time.Duration(i-fineBuckets+1)*coarseBucket
}

// Lateness is a lock-free histogram of chunk write lateness (the engine
// event's instant to the chunk written and flushed): 10 µs resolution up
// to 10 ms, 100 µs up to 2 s. Safe for concurrent use.
type Lateness struct {
	counts   [lateBuckets + 1]atomic.Int64
	n, sumNs atomic.Int64
	maxNs    atomic.Int64
}

// Observe records one chunk's lateness (negative values count as 0).
func (l *Lateness) Observe(d time.Duration) {
	d = max(d, 0)
	l.counts[lateIndex(d)].Add(1)
	l.n.Add(1)
	l.sumNs.Add(int64(d))
	for {
		m := l.maxNs.Load()
		if int64(d) <= m || l.maxNs.CompareAndSwap(m, int64(d)) {
			break
		}
	}
}

// Count is the number of observations.
func (l *Lateness) Count() int64 { return l.n.Load() }

// Mean is the mean lateness.
func (l *Lateness) Mean() time.Duration {
	n := l.n.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(l.sumNs.Load() / n)
}

// Max is the largest lateness observed.
func (l *Lateness) Max() time.Duration { return time.Duration(l.maxNs.Load()) }

// Quantile returns the upper edge of the bucket holding the q-quantile
// (0 < q ≤ 1): the true value is at most one bucket width less. Beyond 2 s
// it returns Max.
func (l *Lateness) Quantile(q float64) time.Duration {
	n := l.n.Load()
	if n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(n))) // nearest rank
	rank = min(max(rank, 1), n)
	var seen int64
	for i := range l.counts {
		seen += l.counts[i].Load()
		if seen >= rank {
			if i == lateBuckets {
				return l.Max()
			}
			return min(lateUpper(i), l.Max())
		}
	}
	return l.Max()
}

// Reset clears the histogram (not atomically with concurrent Observe).
func (l *Lateness) Reset() {
	for i := range l.counts {
		l.counts[i].Store(0)
	}
	l.n.Store(0)
	l.sumNs.Store(0)
	l.maxNs.Store(0)
}
