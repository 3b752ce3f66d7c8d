package stats

import (
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/stat/distuv"
)

// BootstrapCI returns the 95 % bootstrap confidence interval of the
// nearest-rank percentile p of an ascending sample, from b resamples drawn
// with src: the 2.5th and 97.5th nearest-rank percentiles of the b
// resampled percentiles. The same src state gives the same interval.
//
// A resample of n values drawn with replacement has, as its k-th smallest
// value, sorted[⌊n·U₍k₎⌋] where U₍k₎ is the k-th smallest of n uniform draws,
// and U₍k₎ follows Beta(k, n+1−k). Drawing that Beta variate gives exactly
// the resample's percentile without building the resample, so each
// resample costs O(1) instead of O(n). An empty sample or b ≤ 0 gives
// (0, 0); one value gives (it, it).
func BootstrapCI(sorted []int64, p float64, b int, src rand.Source) (lo, hi int64) {
	n := len(sorted)
	if n == 0 || b <= 0 {
		return 0, 0
	}
	if n == 1 {
		return sorted[0], sorted[0]
	}
	vals := resamplePercentiles(sorted, p, b, src)
	slices.Sort(vals)
	return Percentile(vals, 2.5), Percentile(vals, 97.5)
}

// BootstrapDiffCI returns the 95 % bootstrap interval of percentile p of
// sample b minus percentile p of sample a (both ascending), resampling the
// two independently, resamples times each; ok is false when either sample
// has fewer than two values or resamples ≤ 0.
func BootstrapDiffCI(a, b []int64, p float64, resamples int, src rand.Source) (lo, hi float64, ok bool) {
	if len(a) < 2 || len(b) < 2 || resamples <= 0 {
		return 0, 0, false
	}
	da, db := resamplePercentiles(a, p, resamples, src), resamplePercentiles(b, p, resamples, src)
	d := make([]float64, resamples)
	for i := range d {
		d[i] = float64(db[i] - da[i])
	}
	slices.Sort(d)
	return Percentile(d, 2.5), Percentile(d, 97.5), true
}

// resamplePercentiles draws b bootstrap replicates of the nearest-rank
// percentile p of an ascending sample (see BootstrapCI).
func resamplePercentiles(sorted []int64, p float64, b int, src rand.Source) []int64 {
	n := len(sorted)
	k := Rank(p, int64(n))
	beta := distuv.Beta{Alpha: float64(k), Beta: float64(int64(n) + 1 - k), Src: src}
	vals := make([]int64, b)
	for i := range vals {
		j := int(float64(n) * beta.Rand())
		vals[i] = sorted[min(max(j, 0), n-1)]
	}
	return vals
}

// BootstrapSD returns the bootstrap standard deviation of the nearest-rank
// percentile p of an ascending sample, computed exactly rather than by
// resampling: the resampled percentile is sorted[j] with probability
// F((j+1)/n) − F(j/n), F the CDF of Beta(k, n+1−k) and k the percentile's
// rank (see BootstrapCI), so its variance is Σ w_j·x_j² − (Σ w_j·x_j)².
// Only the ranks within 12 standard deviations of the Beta's mean are
// summed (the rest weigh under 10⁻³⁰). Fewer than two values give 0.
func BootstrapSD(sorted []int64, p float64) float64 {
	n := len(sorted)
	if n < 2 {
		return 0
	}
	k := Rank(p, int64(n))
	beta := distuv.Beta{Alpha: float64(k), Beta: float64(int64(n) + 1 - k)}
	nf := float64(n)
	spread := 12 * math.Sqrt(beta.Variance()) * nf
	lo := max(0, int(math.Floor(float64(k-1)-spread))-1)
	hi := min(n-1, int(math.Ceil(float64(k-1)+spread))+1)
	var mean, sq float64
	prev := beta.CDF(float64(lo) / nf)
	for j := lo; j <= hi; j++ {
		next := 1.0
		if j < n-1 {
			next = beta.CDF(float64(j+1) / nf)
		}
		w, x := next-prev, float64(sorted[j])
		mean += w * x
		sq += w * x * x
		prev = next
	}
	return math.Sqrt(max(0, sq-mean*mean))
}
