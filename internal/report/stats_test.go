package report

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestPercentileNearestRank(t *testing.T) {
	five := []int64{15, 20, 35, 40, 50}
	hundred := make([]int64, 100)
	for i := range hundred {
		hundred[i] = int64(i + 1)
	}
	thousand := make([]int64, 1000)
	for i := range thousand {
		thousand[i] = int64(i + 1)
	}
	tests := []struct {
		name   string
		sample []int64
		p      float64
		want   int64
	}{
		// ⌈p/100 × n⌉-th smallest.
		{"five p5", five, 5, 15},   // ⌈0.25⌉ = 1
		{"five p30", five, 30, 20}, // ⌈1.5⌉ = 2
		{"five p40", five, 40, 20}, // ⌈2.0⌉ = 2
		{"five p50", five, 50, 35}, // ⌈2.5⌉ = 3
		{"five p100", five, 100, 50},
		{"1..100 p95", hundred, 95, 95}, // exactly 95, not 96 from 95.00000000000001
		{"1..100 p99", hundred, 99, 99},
		{"1..100 p99.9", hundred, 99.9, 100}, // ⌈99.9⌉
		{"1..1000 p99.9", thousand, 99.9, 999},
		{"1..1000 p0.01", thousand, 0.01, 1},
		{"one", []int64{7}, 99, 7},
		{"empty", nil, 50, 0},
	}
	for _, tt := range tests {
		if got := percentile(tt.sample, tt.p); got != tt.want {
			t.Errorf("%s: percentile(%v) = %d, want %d", tt.name, tt.p, got, tt.want)
		}
	}
}

func TestBootstrapHandCases(t *testing.T) {
	rng := newRand(1)
	if lo, hi := bootstrapCI([]int64{42}, 99, 1000, rng); lo != 42 || hi != 42 {
		t.Errorf("one value: CI [%d, %d], want [42, 42]", lo, hi)
	}
	if lo, hi := bootstrapCI([]int64{5, 5, 5, 5}, 95, 1000, rng); lo != 5 || hi != 5 {
		t.Errorf("constant sample: CI [%d, %d], want [5, 5]", lo, hi)
	}
	// {1, 2}, P50 is the smaller value (rank ⌈1⌉ = 1). A resample's minimum
	// is 2 only when both draws are 2: probability 1/4. So the 2.5th
	// percentile of resampled P50s is 1 and the 97.5th is 2.
	if lo, hi := bootstrapCI([]int64{1, 2}, 50, 2000, rng); lo != 1 || hi != 2 {
		t.Errorf("{1,2} P50: CI [%d, %d], want [1, 2]", lo, hi)
	}
	// Same seed, same interval.
	s := []int64{1, 3, 4, 8, 9, 12, 15, 19, 30, 44, 51, 70}
	lo1, hi1 := bootstrapCI(s, 90, 500, newRand(9))
	lo2, hi2 := bootstrapCI(s, 90, 500, newRand(9))
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
	rng := newRand(3)
	for range draws / 1000 {
		// 1,000 resamples at a time through the same code path.
		vals := drawOrderStats(sorted, 50, 1000, rng)
		for _, v := range vals {
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

func TestLinearFitByHand(t *testing.T) {
	f, ok := linearFit([]float64{1, 2, 3}, []float64{2, 4, 6})
	if !ok || f.Slope != 2 || f.Intercept != 0 || f.R2 != 1 {
		t.Errorf("exact line: %+v %v", f, ok)
	}
	// x̄ = 1.5, ȳ = 2.75, Sxy = 5.5, Sxx = 5, Syy = 8.75:
	// slope 1.1, intercept 1.1, R² = 5.5² / (5 × 8.75) = 0.691428…
	f, _ = linearFit([]float64{0, 1, 2, 3}, []float64{1, 3, 2, 5})
	want := fit{Slope: 1.1, Intercept: 1.1, R2: 30.25 / 43.75, N: 4}
	if diff := cmp.Diff(want, f, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
		t.Errorf("fit (-want +got):\n%s", diff)
	}
	if _, ok := linearFit([]float64{1, 1, 1}, []float64{1, 2, 3}); ok {
		t.Error("no spread in x must not fit")
	}
}

func TestHistogramResolution(t *testing.T) {
	for _, v := range []int64{0, 1, 1023, 1024, 1025, 2047, 2048, 1e6, 123456789, 1 << 40} {
		got := histValue(histIndex(v))
		if v < histSub && got != v {
			t.Errorf("value %d below %d must be exact, got %d", v, histSub, got)
		}
		if rel := math.Abs(float64(got-v)) / math.Max(float64(v), 1); rel > 0.0005 {
			t.Errorf("value %d read back as %d (%.5f off)", v, got, rel)
		}
	}
	var h logHist
	for v := int64(1); v <= 100; v++ {
		h.add(v)
	}
	if h.percentile(95) != 95 || h.percentile(50) != 50 || h.mean() != 50.5 {
		t.Errorf("histogram of 1..100: p95 %d p50 %d mean %v", h.percentile(95), h.percentile(50), h.mean())
	}
}

func TestGapsSwitchToHistogram(t *testing.T) {
	g := gaps{exactCap: 10}
	for v := int64(1); v <= 100; v++ {
		g.add(v * 1000)
	}
	if g.hist == nil || g.exact != nil || g.n != 100 {
		t.Fatalf("after the cap the sample must move to the histogram: %+v", g)
	}
	if p := g.hist.percentile(50); math.Abs(float64(p-50000)) > 50000*0.0005 {
		t.Errorf("p50 %d, want ≈ 50000", p)
	}
}
