package stats

import (
	"math"
	"math/bits"
)

// Bucket layout. Values below subBuckets have a bucket each (exact); above,
// each power of two [2^(e+10), 2^(e+11)) is cut into subBuckets buckets of
// width 2^e. A bucket is read back as its midpoint, which is within
// 2^(e−1) / 2^(e+10) = 1/2048 of every value counted in it.
const (
	subBits    = 10
	subBuckets = 1 << subBits // 1,024
	// maxIndex is the index of the bucket holding math.MaxInt64.
	maxIndex = subBuckets + (63-subBits-1)*subBuckets + subBuckets - 1
)

// RelativeError bounds a [Histogram]'s percentiles: for every p,
// |h.Percentile(p) − x| ≤ x × RelativeError, where x is the exact
// nearest-rank percentile p of the values added (values below 1,024 are
// exact). It is 1/2048, about 0.049 %.
const RelativeError = 1.0 / (2 * subBuckets)

// bucketOf returns the index of the bucket holding v ≥ 0.
func bucketOf(v int64) int { return layoutOf(v, subBits) }

// bucketLow and bucketWidth give the lowest value of bucket i and how many
// values it holds.
func bucketLow(i int) int64 { return layoutLow(i, subBits) }

func bucketWidth(i int) int64 { return layoutWidth(i, subBits) }

// The log-linear layout with 2^b buckets per power of two (Histogram's b
// is subBits, Sketch's sketchBits): values below 2^b have a bucket each,
// then [2^(e+b), 2^(e+b+1)) is cut into 2^b buckets of width 2^e.
func layoutOf(v int64, b int) int {
	if v < 1<<b {
		return int(max(v, 0))
	}
	e := bits.Len64(uint64(v)) - b - 1 // v>>e lies in [2^b, 2^(b+1))
	return e<<b + int(v>>e)
}

func layoutLow(i, b int) int64 {
	if i < 1<<b {
		return int64(i)
	}
	e := i>>b - 1
	return int64(1<<b+i&(1<<b-1)) << e
}

func layoutWidth(i, b int) int64 {
	if i < 1<<b {
		return 1
	}
	return int64(1) << (i>>b - 1)
}

// bucketMid is the value bucket i is read back as.
func bucketMid(i int) int64 { return bucketLow(i) + bucketWidth(i)/2 }

// Histogram counts non-negative integers (durations in nanoseconds, token
// counts) in log-linear buckets: exact below 1,024, then 1,024 buckets per
// power of two. Its percentiles are nearest-rank ([Rank]) read as the
// bucket's midpoint, clamped to the exact minimum and maximum, so within
// [RelativeError] of the exact percentile. It also keeps the exact count,
// sum, minimum and maximum. Merging two histograms gives exactly the
// histogram of the union of their values, whatever the order, so
// histograms from several machines add up. A negative value counts as 0.
//
// The zero value is empty and ready to use. A Histogram is not safe for
// concurrent use; see [Concurrent]. Memory grows with the range of the
// values (8 bytes per bucket up to the largest: about 170 KB for values up
// to 1 s in nanoseconds, 225 KB up to 100 s), not with their number.
type Histogram struct {
	counts   []int64
	n        int64
	sum      int64 // saturates at math.MaxInt64
	min, max int64
}

// Add counts one value.
func (h *Histogram) Add(v int64) {
	v = max(v, 0)
	i := bucketOf(v)
	if i >= len(h.counts) {
		h.grow(i + 1)
	}
	h.counts[i]++
	if h.n == 0 {
		h.min, h.max = v, v
	} else {
		h.min, h.max = min(h.min, v), max(h.max, v)
	}
	h.n++
	h.sum = addSat(h.sum, v)
}

// grow extends counts to at least n buckets.
func (h *Histogram) grow(n int) {
	if n <= cap(h.counts) {
		h.counts = h.counts[:n]
		return
	}
	c := make([]int64, n, max(n, 2*cap(h.counts)))
	copy(c, h.counts)
	h.counts = c
}

// addSat adds two non-negative numbers, saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxInt64
}

// Merge adds o's values to h; o is unchanged. Afterwards h is exactly the
// histogram of both sets of values.
func (h *Histogram) Merge(o *Histogram) {
	if o == nil || o.n == 0 {
		return
	}
	lo, hi := bucketOf(o.min), bucketOf(o.max)+1
	if hi > len(h.counts) {
		h.grow(hi)
	}
	for i := lo; i < hi; i++ {
		h.counts[i] += o.counts[i]
	}
	if h.n == 0 {
		h.min, h.max = o.min, o.max
	} else {
		h.min, h.max = min(h.min, o.min), max(h.max, o.max)
	}
	h.n += o.n
	h.sum = addSat(h.sum, o.sum)
}

// Reset empties h, keeping its storage; the cost is the range of buckets
// used, not the storage's size.
func (h *Histogram) Reset() {
	if h.n > 0 {
		clear(h.counts[bucketOf(h.min) : bucketOf(h.max)+1])
	}
	h.n, h.sum, h.min, h.max = 0, 0, 0, 0
}

// Clone returns a copy that later changes to h do not affect.
func (h *Histogram) Clone() *Histogram {
	c := *h
	if h.n > 0 {
		c.counts = append([]int64(nil), h.counts[:bucketOf(h.max)+1]...)
	} else {
		c.counts = nil
	}
	return &c
}

// Count is the number of values added.
func (h *Histogram) Count() int64 { return h.n }

// Sum is the exact sum of the values added (math.MaxInt64 if it overflowed:
// about 292 years of nanoseconds).
func (h *Histogram) Sum() int64 { return h.sum }

// Min and Max are the smallest and largest values added, exactly; 0 when
// empty.
func (h *Histogram) Min() int64 { return h.min }

// Max is the largest value added; see [Histogram.Min].
func (h *Histogram) Max() int64 { return h.max }

// Mean is the exact mean of the values added; 0 when empty.
func (h *Histogram) Mean() float64 {
	if h.n == 0 {
		return 0
	}
	return float64(h.sum) / float64(h.n)
}

// Percentile returns the nearest-rank percentile p ([Rank]) of the values
// added: the midpoint of the bucket holding the value of that rank,
// clamped to [Min, Max], so within [RelativeError] of the exact value (and
// exact for the first and last rank, for values below 1,024 and when every
// value is the same). It returns 0 when h is empty.
func (h *Histogram) Percentile(p float64) int64 {
	if h.n == 0 {
		return 0
	}
	k := Rank(p, h.n)
	switch k {
	case 1:
		return h.min
	case h.n:
		return h.max
	}
	var c int64
	for i, hi := bucketOf(h.min), bucketOf(h.max); i <= hi; i++ {
		c += h.counts[i]
		if c >= k {
			return min(max(bucketMid(i), h.min), h.max)
		}
	}
	return h.max // not reached: the counts sum to n
}
