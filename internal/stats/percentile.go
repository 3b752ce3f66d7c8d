package stats

import (
	"cmp"
	"math"
)

// Rank returns the 1-based nearest rank of percentile p in a sample of n
// values: k = ⌈p/100 × n⌉, with p/100 × n rounded to 10⁻⁹ first (so that
// 0.95 × 100 is 95, not 95.00000000000001), clamped to [1, n]. It is 0
// when n ≤ 0. p is meant to lie in (0, 100]; p ≤ 0 gives rank 1 (the
// minimum) and p ≥ 100 rank n (the maximum). The value at rank k of the
// ascending sample is the percentile (docs/metrics.md, "Percentile").
func Rank(p float64, n int64) int64 {
	if n <= 0 {
		return 0
	}
	if math.IsNaN(p) || p <= 0 {
		return 1
	}
	if p >= 100 {
		return n
	}
	k := int64(math.Ceil(math.Round(p/100*float64(n)*1e9) / 1e9))
	return min(max(k, 1), n)
}

// Percentile returns the nearest-rank percentile p (see [Rank]) of an
// ascending sample: always a value of the sample, never an interpolation.
// It returns the zero value for an empty sample.
func Percentile[S ~[]E, E cmp.Ordered](sorted S, p float64) E {
	if len(sorted) == 0 {
		var zero E
		return zero
	}
	return sorted[Rank(p, int64(len(sorted)))-1]
}

// Number is a type Mean averages.
type Number interface {
	~int | ~int32 | ~int64 | ~uint32 | ~uint64 | ~float32 | ~float64
}

// Mean returns the arithmetic mean of xs, summed in float64; 0 when xs is
// empty.
func Mean[S ~[]E, E Number](xs S) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += float64(x)
	}
	return s / float64(len(xs))
}
