package stats

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func pcg(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x746f6b656e)) }

func TestBootstrapHandCases(t *testing.T) {
	rng := pcg(1)
	if lo, hi := BootstrapCI(nil, 99, 1000, rng); lo != 0 || hi != 0 {
		t.Errorf("empty: CI [%d, %d]", lo, hi)
	}
	if lo, hi := BootstrapCI([]int64{42}, 99, 1000, rng); lo != 42 || hi != 42 {
		t.Errorf("one value: CI [%d, %d], want [42, 42]", lo, hi)
	}
	if lo, hi := BootstrapCI([]int64{5, 5, 5, 5}, 95, 1000, rng); lo != 5 || hi != 5 {
		t.Errorf("constant sample: CI [%d, %d], want [5, 5]", lo, hi)
	}
	// {1, 2}, P50 is the smaller value (rank ⌈1⌉ = 1). A resample's minimum
	// is 2 only when both draws are 2: probability 1/4. So the 2.5th
	// percentile of resampled P50s is 1 and the 97.5th is 2.
	if lo, hi := BootstrapCI([]int64{1, 2}, 50, 2000, rng); lo != 1 || hi != 2 {
		t.Errorf("{1,2} P50: CI [%d, %d], want [1, 2]", lo, hi)
	}
	// Same seed, same interval.
	s := []int64{1, 3, 4, 8, 9, 12, 15, 19, 30, 44, 51, 70}
	lo1, hi1 := BootstrapCI(s, 90, 500, pcg(9))
	lo2, hi2 := BootstrapCI(s, 90, 500, pcg(9))
	if lo1 != lo2 || hi1 != hi2 {
		t.Errorf("not deterministic: [%d,%d] vs [%d,%d]", lo1, hi1, lo2, hi2)
	}
}

// TestBootstrapOrderStatisticIsExact checks the Beta shortcut against the
// bootstrap's exact law: for the sample 1..10 and P50 (the 5th smallest),
// P(resampled P50 ≤ i) = P(Binomial(10, i/10) ≥ 5).
func TestBootstrapOrderStatisticIsExact(t *testing.T) {
	n, k := 10, 5
	sorted := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	const draws = 200000
	counts := make([]int, n+1)
	rng := pcg(3)
	for range draws / 1000 {
		// 1,000 resamples at a time through the same code path.
		for _, v := range resamplePercentiles(sorted, 50, 1000, rng) {
			counts[v]++
		}
	}
	cum := 0
	for i := 1; i <= n; i++ {
		cum += counts[i]
		want := binomTail(n, float64(i)/float64(n), k)
		if got := float64(cum) / draws; math.Abs(got-want) > 0.005 {
			t.Errorf("P(P50 ≤ %d) = %.4f, want %.4f", i, got, want)
		}
	}
}

// binomTail is P(Binomial(n, p) ≥ k).
func binomTail(n int, p float64, k int) float64 {
	var s float64
	for j := k; j <= n; j++ {
		c := 1.0
		for m := 0; m < j; m++ {
			c = c * float64(n-m) / float64(m+1)
		}
		s += c * math.Pow(p, float64(j)) * math.Pow(1-p, float64(n-j))
	}
	return s
}

// TestBootstrapDiffCI: two identical samples differ by 0 at the median of
// the replicates' differences and their interval holds 0; a sample shifted
// by 100 has an interval around 100 that excludes 0.
func TestBootstrapDiffCI(t *testing.T) {
	a := make([]int64, 200)
	b := make([]int64, 200)
	for i := range a {
		a[i] = int64(i)
		b[i] = int64(i) + 100
	}
	if _, _, ok := BootstrapDiffCI(a[:1], b, 50, 100, pcg(1)); ok {
		t.Error("one value must give no interval")
	}
	lo, hi, ok := BootstrapDiffCI(a, a, 50, 2000, pcg(1))
	if !ok || lo > 0 || hi < 0 {
		t.Errorf("same sample: [%v, %v]", lo, hi)
	}
	lo, hi, ok = BootstrapDiffCI(a, b, 50, 2000, pcg(1))
	if !ok || lo <= 0 || lo > 100 || hi < 100 {
		t.Errorf("shifted by 100: [%v, %v]", lo, hi)
	}
}

// BootstrapSD by hand: {10, 20, 30, 40} at P50 is rank 2, so the
// resampled P50 is the value at ⌊4·U⌋ with U ~ Beta(2, 3), whose CDF is
// 6x² − 8x³ + 3x⁴: at ¼, ½, ¾ it is 0.26171875, 0.6875, 0.94921875, so
// the weights are 0.26171875, 0.42578125, 0.26171875, 0.05078125; the
// mean 21.015625, the mean square 513.28125, the variance
// 513.28125 − 21.015625² = 71.624755859375, the SD 8.46314. {1, 2} at
// P50: 1 with probability ¾, 2 with ¼ — SD √(3/16) = 0.4330127.
func TestBootstrapSDByHand(t *testing.T) {
	for _, tt := range []struct {
		in   []int64
		p    float64
		want float64
	}{
		{[]int64{10, 20, 30, 40}, 50, math.Sqrt(71.624755859375)},
		{[]int64{1, 2}, 50, math.Sqrt(3.0 / 16)},
		{[]int64{5, 5, 5, 5}, 95, 0},
		{[]int64{7}, 50, 0},
		{nil, 50, 0},
	} {
		if got := BootstrapSD(tt.in, tt.p); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("BootstrapSD(%v, %v) = %.9f, want %.9f", tt.in, tt.p, got, tt.want)
		}
	}
}

// BootstrapSD agrees with the resampled percentiles' spread (the draws
// BootstrapCI takes) within the resampling's own error, on a long sample
// where only a window of ranks is summed.
func TestBootstrapSDAgreesWithResampling(t *testing.T) {
	rng := pcg(3)
	s := make([]int64, 5000)
	for i := range s {
		s[i] = int64(1000 * rng.ExpFloat64())
	}
	slices.Sort(s)
	for _, p := range []float64{50, 95, 99} {
		vals := resamplePercentiles(s, p, 20000, pcg(4))
		var mean, sq float64
		for _, v := range vals {
			mean += float64(v)
			sq += float64(v) * float64(v)
		}
		mean /= float64(len(vals))
		sd := math.Sqrt(sq/float64(len(vals)) - mean*mean)
		if got := BootstrapSD(s, p); math.Abs(got-sd) > 0.03*sd {
			t.Errorf("P%v: BootstrapSD %.3f, resampled %.3f", p, got, sd)
		}
	}
}
