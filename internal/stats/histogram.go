package stats

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
	core
}

// Add counts one value.
func (h *Histogram) Add(v int64) { h.add(v, bucketOf(v)) }

// AddAll counts each of vs, as Add does, in one pass.
func (h *Histogram) AddAll(vs []int64) { h.addAll(vs, subBits) }

// Merge adds o's values to h; o is unchanged. Afterwards h is exactly the
// histogram of both sets of values.
func (h *Histogram) Merge(o *Histogram) {
	if o != nil {
		h.merge(&o.core, subBits)
	}
}

// Reset empties h, keeping its storage; the cost is the range of buckets
// used, not the storage's size.
func (h *Histogram) Reset() { h.reset(subBits) }

// Clone returns a copy that later changes to h do not affect.
func (h *Histogram) Clone() *Histogram { return &Histogram{h.clone(subBits)} }

// Percentile returns the nearest-rank percentile p ([Rank]) of the values
// added: the midpoint of the bucket holding the value of that rank,
// clamped to [Min, Max], so within [RelativeError] of the exact value (and
// exact for the first and last rank, for values below 1,024 and when every
// value is the same). It returns 0 when h is empty.
func (h *Histogram) Percentile(p float64) int64 { return h.percentile(p, subBits) }
