package stats

// sketchBits is Sketch's layout: 2^7 = 128 buckets per power of two.
const sketchBits = 7

// SketchError bounds a [Sketch]'s percentiles as [RelativeError] bounds a
// [Histogram]'s: within 1/256 (about 0.39 %) of the exact nearest-rank
// percentile (values below 128 are exact).
const SketchError = 1.0 / (2 << sketchBits)

// Sketch is a [Histogram] with 128 buckets per power of two instead of
// 1,024 (the same bucket store at another resolution): eight times less
// memory (about 1 KB per power of two the values span) and as much less
// to merge, reset and scan, for many short-lived histograms read often
// (the live view's one-second windows) where 0.39 % is close enough. Its
// percentiles are nearest-rank ([Rank]) read as the bucket's midpoint,
// clamped to the exact minimum and maximum; count, sum, minimum and
// maximum are exact; merging is exact. A negative value counts as 0. The
// zero value is empty and ready to use; it is not safe for concurrent
// use.
type Sketch struct {
	core
}

// Add counts one value.
func (s *Sketch) Add(v int64) { s.add(v, layoutOf(v, sketchBits)) }

// AddAll counts each of vs, as Add does, in one pass.
func (s *Sketch) AddAll(vs []int64) { s.addAll(vs, sketchBits) }

// Merge adds o's values to s; o is unchanged.
func (s *Sketch) Merge(o *Sketch) {
	if o != nil {
		s.merge(&o.core, sketchBits)
	}
}

// Reset empties s, keeping its storage; the cost is the range of buckets
// used.
func (s *Sketch) Reset() { s.reset(sketchBits) }

// Percentiles returns the nearest-rank percentiles ps (ascending) of the
// values added, read in one pass, each within [SketchError] (exact for
// the first and last rank and below 128); zeros when s is empty.
func (s *Sketch) Percentiles(ps ...float64) []int64 { return s.percentiles(ps, sketchBits) }
