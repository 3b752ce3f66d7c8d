package report

import (
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/stat/distuv"
)

// rank returns the 1-based nearest rank of percentile p (0 < p ≤ 100) in a
// sample of n: ⌈p/100 × n⌉, at least 1. The value at that rank in the sorted
// sample is the percentile (docs/metrics.md, "Percentiles").
func rank(p float64, n int) int {
	if n <= 0 {
		return 0
	}
	// Round p×n to 1e-9 before the ceiling so that 0.95×100 is 95, not 95.00000000000001.
	k := int(math.Ceil(math.Round(p/100*float64(n)*1e9) / 1e9))
	return min(max(k, 1), n)
}

// percentile is the nearest-rank percentile p of an ascending sample; 0 for
// an empty one (callers check the count first).
func percentile(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[rank(p, len(sorted))-1]
}

// mean of a sample as a float, 0 when empty.
func mean(xs []int64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += float64(x)
	}
	return s / float64(len(xs))
}

// bootstrapCI is the 95 % bootstrap confidence interval of the nearest-rank
// percentile p of an ascending sample, from b resamples drawn with rng.
//
// A resample of n values drawn with replacement from the sample has, as its
// k-th smallest value, sorted[⌊n·U₍k₎⌋] where U₍k₎ is the k-th smallest of n
// uniform draws, and U₍k₎ follows Beta(k, n+1−k). Drawing that Beta variate
// gives exactly the resample's percentile without building the resample, so
// each of the b resamples costs O(1) instead of O(n). The interval is the
// 2.5th and 97.5th nearest-rank percentiles of the b resampled values.
func bootstrapCI(sorted []int64, p float64, b int, rng *rand.Rand) (lo, hi int64) {
	n := len(sorted)
	if n == 0 || b <= 0 {
		return 0, 0
	}
	if n == 1 {
		return sorted[0], sorted[0]
	}
	vals := drawOrderStats(sorted, p, b, rng)
	slices.Sort(vals)
	return percentile(vals, 2.5), percentile(vals, 97.5)
}

// drawOrderStats draws b bootstrap replicates of the nearest-rank
// percentile p of an ascending sample (see bootstrapCI).
func drawOrderStats(sorted []int64, p float64, b int, rng *rand.Rand) []int64 {
	n := len(sorted)
	k := rank(p, n)
	beta := distuv.Beta{Alpha: float64(k), Beta: float64(n + 1 - k), Src: rng}
	vals := make([]int64, b)
	for i := range vals {
		j := int(float64(n) * beta.Rand())
		vals[i] = sorted[min(max(j, 0), n-1)]
	}
	return vals
}

// bootstrapDiffCI is the 95 % bootstrap interval of percentile p of b minus
// percentile p of a, resampling the two samples independently.
func bootstrapDiffCI(a, b []int64, p float64, resamples int, rng *rand.Rand) (lo, hi float64, ok bool) {
	if len(a) < 2 || len(b) < 2 || resamples <= 0 {
		return 0, 0, false
	}
	da, db := drawOrderStats(a, p, resamples, rng), drawOrderStats(b, p, resamples, rng)
	d := make([]float64, resamples)
	for i := range d {
		d[i] = float64(db[i] - da[i])
	}
	slices.Sort(d)
	at := func(q float64) float64 { return d[rank(q, len(d))-1] }
	return at(2.5), at(97.5), true
}

// fit is an ordinary least-squares line y = Intercept + Slope·x.
type fit struct {
	Slope, Intercept float64
	R2               float64 // coefficient of determination
	N                int
}

// linearFit fits y on x by least squares; ok is false with fewer than three
// points or no spread in x.
func linearFit(xs, ys []float64) (f fit, ok bool) {
	n := len(xs)
	if n < 3 || len(ys) != n {
		return fit{}, false
	}
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= float64(n)
	my /= float64(n)
	var sxx, sxy, syy float64
	for i := range xs {
		dx, dy := xs[i]-mx, ys[i]-my
		sxx += dx * dx
		sxy += dx * dy
		syy += dy * dy
	}
	if sxx == 0 {
		return fit{}, false
	}
	f = fit{Slope: sxy / sxx, N: n}
	f.Intercept = my - f.Slope*mx
	if syy > 0 {
		f.R2 = sxy * sxy / (sxx * syy)
	}
	return f, true
}

// newRand returns the report's deterministic random source.
func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x746f6b656e)) }
