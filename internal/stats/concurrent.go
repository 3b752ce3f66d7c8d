package stats

import (
	"math"
	"sync/atomic"
)

// segments is how many blocks of subBuckets buckets cover every int64.
const segments = maxIndex/subBuckets + 1

// Concurrent records values into the same buckets as [Histogram] without
// locks, for hot paths written by many goroutines (a server's per-chunk
// timing, a load generator's progress line). Read it with
// [Concurrent.Snapshot]. Its storage is allocated 8 KiB at a time as the
// values' range grows. The zero value is empty and ready to use.
type Concurrent struct {
	segs [segments]atomic.Pointer[[subBuckets]atomic.Int64]
	n    atomic.Int64
	sum  atomic.Int64
	max  atomic.Int64
	// negMin is math.MaxInt64 − the minimum, so that its zero value means
	// "no value yet" and it only ever grows, like max.
	negMin atomic.Int64
}

// Add counts one value (a negative value counts as 0).
func (c *Concurrent) Add(v int64) {
	v = max(v, 0)
	i := bucketOf(v)
	seg := c.segs[i/subBuckets].Load()
	if seg == nil {
		seg = new([subBuckets]atomic.Int64)
		if !c.segs[i/subBuckets].CompareAndSwap(nil, seg) {
			seg = c.segs[i/subBuckets].Load()
		}
	}
	seg[i%subBuckets].Add(1)
	c.sum.Add(v)
	raise(&c.max, v)
	raise(&c.negMin, math.MaxInt64-v)
	c.n.Add(1)
}

// raise sets a to v if v is larger.
func raise(a *atomic.Int64, v int64) {
	for {
		m := a.Load()
		if v <= m || a.CompareAndSwap(m, v) {
			return
		}
	}
}

// Count is the number of values added.
func (c *Concurrent) Count() int64 { return c.n.Load() }

// Sum is the sum of the values added (math.MaxInt64 if it overflowed, as
// [Histogram.Sum]).
func (c *Concurrent) Sum() int64 { return sat(c.sum.Load()) }

// sat reads a sum of non-negative values that may have wrapped once.
func sat(s int64) int64 {
	if s < 0 {
		return math.MaxInt64
	}
	return s
}

// Max is the largest value added; 0 when empty.
func (c *Concurrent) Max() int64 { return c.max.Load() }

// Snapshot copies the values added so far into dst (emptied first, its
// storage reused) and returns it; a nil dst is allocated. Values added
// while it copies may be partly included (its count is then the sum of the
// buckets it read).
func (c *Concurrent) Snapshot(dst *Histogram) *Histogram {
	if dst == nil {
		dst = &Histogram{}
	}
	dst.Reset()
	top := -1
	for s := range c.segs {
		if c.segs[s].Load() != nil {
			top = s
		}
	}
	if top < 0 {
		return dst
	}
	dst.grow((top + 1) * subBuckets)
	first := true
	for s := 0; s <= top; s++ {
		seg := c.segs[s].Load()
		if seg == nil {
			continue
		}
		for j := range seg {
			k := seg[j].Load()
			if k == 0 {
				continue
			}
			i := s*subBuckets + j
			dst.counts[i] = k
			dst.n += k
			if first {
				dst.min, first = bucketLow(i), false
			}
			dst.max = bucketLow(i) + bucketWidth(i) - 1
		}
	}
	if dst.n == 0 {
		return dst
	}
	// The exact extremes, when they fall in the buckets read (a value
	// added during the copy may not have).
	if m := math.MaxInt64 - c.negMin.Load(); bucketOf(m) == bucketOf(dst.min) {
		dst.min = m
	}
	if m := c.max.Load(); bucketOf(m) == bucketOf(dst.max) {
		dst.max = m
	}
	dst.sum = sat(c.sum.Load())
	return dst
}

// Reset empties c. Values added while it runs may be lost or half kept.
func (c *Concurrent) Reset() {
	for s := range c.segs {
		if seg := c.segs[s].Load(); seg != nil {
			for j := range seg {
				seg[j].Store(0)
			}
		}
	}
	c.n.Store(0)
	c.sum.Store(0)
	c.max.Store(0)
	c.negMin.Store(0)
}
