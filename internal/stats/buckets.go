package stats

import (
	"math"
	"math/bits"
)

// The log-linear layout with 2^b buckets per power of two (Histogram's b
// is subBits, Sketch's sketchBits): values below 2^b have a bucket each,
// then [2^(e+b), 2^(e+b+1)) is cut into 2^b buckets of width 2^e. A
// bucket is read back as its midpoint, within 2^(e−1) / 2^(e+b) = 1/2^(b+1)
// of every value counted in it.
func layoutOf(v int64, b int) int {
	if v < 1<<b {
		return int(max(v, 0))
	}
	e := bits.Len64(uint64(v)) - b - 1 // v>>e lies in [2^b, 2^(b+1))
	return e<<b + int(v>>e)
}

// layoutLow and layoutWidth give the lowest value of bucket i and how many
// values it holds.
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

// core is the bucket store [Histogram] and [Sketch] share: the counts of
// the layout of 2^b buckets per power of two, b being the resolution each
// method is given (the type's own, always the same for one store), and
// the exact count, sum, minimum and maximum. Its exported methods are the
// two types' own.
type core struct {
	counts   []int64
	n        int64
	sum      int64 // saturates at math.MaxInt64
	min, max int64
}

// add counts one value (a negative one as 0) in bucket i, which is
// layoutOf(v, b) at the store's resolution b: the caller computes it,
// where b is a constant.
func (c *core) add(v int64, i int) {
	v = max(v, 0)
	if i >= len(c.counts) {
		c.grow(i + 1)
	}
	c.counts[i]++
	if c.n == 0 {
		c.min, c.max = v, v
	} else {
		c.min, c.max = min(c.min, v), max(c.max, v)
	}
	c.n++
	c.sum = addSat(c.sum, v)
}

// addAll counts each of vs as add does, in one pass that keeps the
// count, sum and extremes in registers.
func (c *core) addAll(vs []int64, b int) {
	if len(vs) == 0 {
		return
	}
	lo, hi, sum := c.min, c.max, c.sum
	if c.n == 0 {
		lo, hi = max(vs[0], 0), max(vs[0], 0)
	}
	for _, v := range vs {
		v = max(v, 0)
		i := layoutOf(v, b)
		if i >= len(c.counts) {
			c.grow(i + 1)
		}
		c.counts[i]++
		lo, hi = min(lo, v), max(hi, v)
		sum = addSat(sum, v)
	}
	c.min, c.max, c.sum = lo, hi, sum
	c.n += int64(len(vs))
}

// grow extends counts to at least n buckets.
func (c *core) grow(n int) {
	if n <= cap(c.counts) {
		c.counts = c.counts[:n]
		return
	}
	g := make([]int64, n, max(n, 2*cap(c.counts)))
	copy(g, c.counts)
	c.counts = g
}

// addSat adds two non-negative numbers, saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxInt64
}

// merge adds o's values (same resolution) to c; o is unchanged. The cost
// is the range of buckets o uses.
func (c *core) merge(o *core, b int) {
	if o.n == 0 {
		return
	}
	lo, hi := layoutOf(o.min, b), layoutOf(o.max, b)+1
	if hi > len(c.counts) {
		c.grow(hi)
	}
	src := o.counts[lo:hi]
	dst := c.counts[lo:hi]
	dst = dst[:len(src)]
	for i, k := range src {
		dst[i] += k
	}
	if c.n == 0 {
		c.min, c.max = o.min, o.max
	} else {
		c.min, c.max = min(c.min, o.min), max(c.max, o.max)
	}
	c.n += o.n
	c.sum = addSat(c.sum, o.sum)
}

// reset empties c, keeping its storage; the cost is the range of buckets
// used.
func (c *core) reset(b int) {
	if c.n > 0 {
		clear(c.counts[layoutOf(c.min, b) : layoutOf(c.max, b)+1])
	}
	c.n, c.sum, c.min, c.max = 0, 0, 0, 0
}

// clone is a copy that shares no storage with c.
func (c *core) clone(b int) core {
	d := *c
	d.counts = nil
	if c.n > 0 {
		d.counts = append([]int64(nil), c.counts[:layoutOf(c.max, b)+1]...)
	}
	return d
}

// percentile is the nearest-rank percentile p ([Rank]); 0 when empty.
func (c *core) percentile(p float64, b int) int64 {
	if c.n == 0 {
		return 0
	}
	k := Rank(p, c.n)
	if k == 1 || k == c.n {
		return c.read(0, k, b)
	}
	var sum int64
	for i, hi := layoutOf(c.min, b), layoutOf(c.max, b); i <= hi; i++ {
		if sum += c.counts[i]; sum >= k {
			return c.read(i, k, b)
		}
	}
	return c.max // not reached: the counts sum to n
}

// percentiles is the nearest-rank percentiles ps (ascending), read in one
// pass; zeros when empty.
func (c *core) percentiles(ps []float64, b int) []int64 {
	out := make([]int64, len(ps))
	if c.n == 0 {
		return out
	}
	ranks := make([]int64, len(ps))
	for j, p := range ps {
		ranks[j] = Rank(p, c.n)
	}
	var sum int64
	j := 0
	for i, hi := layoutOf(c.min, b), layoutOf(c.max, b); i <= hi && j < len(ps); i++ {
		sum += c.counts[i]
		for j < len(ps) && sum >= ranks[j] {
			out[j] = c.read(i, ranks[j], b)
			j++
		}
	}
	return out
}

// read is the value of rank k, held in bucket i: the exact minimum or
// maximum for the first or last rank, else the bucket's midpoint clamped
// to them.
func (c *core) read(i int, k int64, b int) int64 {
	switch k {
	case 1:
		return c.min
	case c.n:
		return c.max
	}
	mid := layoutLow(i, b) + layoutWidth(i, b)/2
	return min(max(mid, c.min), c.max)
}

// Count is the number of values added.
func (c *core) Count() int64 { return c.n }

// Sum is the exact sum of the values added (math.MaxInt64 if it overflowed:
// about 292 years of nanoseconds).
func (c *core) Sum() int64 { return c.sum }

// Min is the smallest value added, exactly; 0 when empty.
func (c *core) Min() int64 { return c.min }

// Max is the largest value added, exactly; 0 when empty.
func (c *core) Max() int64 { return c.max }

// Mean is the exact mean of the values added; 0 when empty.
func (c *core) Mean() float64 {
	if c.n == 0 {
		return 0
	}
	return float64(c.sum) / float64(c.n)
}
