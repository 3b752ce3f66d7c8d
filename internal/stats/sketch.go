package stats

// sketchBits is Sketch's layout: 2^7 = 128 buckets per power of two.
const sketchBits = 7

// SketchError bounds a [Sketch]'s percentiles as [RelativeError] bounds a
// [Histogram]'s: within 1/256 (about 0.39 %) of the exact nearest-rank
// percentile (values below 128 are exact).
const SketchError = 1.0 / (2 << sketchBits)

// Sketch is a [Histogram] with 128 buckets per power of two instead of
// 1,024: eight times less memory (about 1 KB per power of two the values
// span) and as much less to merge, reset and scan, for many short-lived
// histograms read often (the live view's one-second windows) where
// 0.39 % is close enough. Its percentiles are nearest-rank ([Rank]) read
// as the bucket's midpoint, clamped to the exact minimum and maximum;
// count, sum, minimum and maximum are exact; merging is exact. A negative
// value counts as 0. The zero value is empty and ready to use; it is not
// safe for concurrent use.
type Sketch struct {
	counts   []int64
	n        int64
	sum      int64 // saturates at math.MaxInt64
	min, max int64
}

// Add counts one value.
func (s *Sketch) Add(v int64) {
	v = max(v, 0)
	i := layoutOf(v, sketchBits)
	if i >= len(s.counts) {
		s.grow(i + 1)
	}
	s.counts[i]++
	if s.n == 0 {
		s.min, s.max = v, v
	} else {
		s.min, s.max = min(s.min, v), max(s.max, v)
	}
	s.n++
	s.sum = addSat(s.sum, v)
}

// grow extends counts to at least n buckets.
func (s *Sketch) grow(n int) {
	if n <= cap(s.counts) {
		s.counts = s.counts[:n]
		return
	}
	c := make([]int64, n, max(n, 2*cap(s.counts)))
	copy(c, s.counts)
	s.counts = c
}

// Merge adds o's values to s; o is unchanged.
func (s *Sketch) Merge(o *Sketch) {
	if o == nil || o.n == 0 {
		return
	}
	lo, hi := layoutOf(o.min, sketchBits), layoutOf(o.max, sketchBits)+1
	if hi > len(s.counts) {
		s.grow(hi)
	}
	for i := lo; i < hi; i++ {
		s.counts[i] += o.counts[i]
	}
	if s.n == 0 {
		s.min, s.max = o.min, o.max
	} else {
		s.min, s.max = min(s.min, o.min), max(s.max, o.max)
	}
	s.n += o.n
	s.sum = addSat(s.sum, o.sum)
}

// Reset empties s, keeping its storage; the cost is the range of buckets
// used.
func (s *Sketch) Reset() {
	if s.n > 0 {
		clear(s.counts[layoutOf(s.min, sketchBits) : layoutOf(s.max, sketchBits)+1])
	}
	s.n, s.sum, s.min, s.max = 0, 0, 0, 0
}

// Count is the number of values added.
func (s *Sketch) Count() int64 { return s.n }

// Max is the largest value added, exactly; 0 when empty.
func (s *Sketch) Max() int64 { return s.max }

// Mean is the exact mean of the values added; 0 when empty.
func (s *Sketch) Mean() float64 {
	if s.n == 0 {
		return 0
	}
	return float64(s.sum) / float64(s.n)
}

// Percentiles returns the nearest-rank percentiles ps (ascending) of the
// values added, read in one pass, each within [SketchError] (exact for
// the first and last rank and below 128); zeros when s is empty.
func (s *Sketch) Percentiles(ps ...float64) []int64 {
	out := make([]int64, len(ps))
	if s.n == 0 {
		return out
	}
	ranks := make([]int64, len(ps))
	for j, p := range ps {
		ranks[j] = Rank(p, s.n)
	}
	var c int64
	j := 0
	for i, hi := layoutOf(s.min, sketchBits), layoutOf(s.max, sketchBits); i <= hi && j < len(ps); i++ {
		c += s.counts[i]
		for j < len(ps) && c >= ranks[j] {
			out[j] = s.read(i, ranks[j])
			j++
		}
	}
	return out
}

// read is the value of rank k, held in bucket i.
func (s *Sketch) read(i int, k int64) int64 {
	switch k {
	case 1:
		return s.min
	case s.n:
		return s.max
	}
	mid := layoutLow(i, sketchBits) + layoutWidth(i, sketchBits)/2
	return min(max(mid, s.min), s.max)
}
