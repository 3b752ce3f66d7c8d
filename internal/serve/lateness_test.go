package serve

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestLatenessQuantiles: the values 0 and 0.5 ms × i for i = 1..100 (101
// observations). The q-quantile is the observation of rank ⌈q·101⌉,
// reported as the midpoint of its internal/stats bucket (width 2^e for
// values in [2^(e+10), 2^(e+11)) ns), the largest exactly.
func TestLatenessQuantiles(t *testing.T) {
	var l Lateness
	for i := 1; i <= 100; i++ {
		l.Observe(time.Duration(i) * 500 * time.Microsecond)
	}
	l.Observe(-time.Millisecond) // counts as 0
	if l.Count() != 101 || l.Max() != 50*time.Millisecond {
		t.Fatalf("count %d max %v", l.Count(), l.Max())
	}
	tests := []struct {
		q    float64
		want time.Duration
	}{
		{0.01, 500_096},            // rank 2: 0.5 ms, bucket [499,968, +256) ns
		{0.5, 24_993_792},          // rank 51: 25 ms, bucket [24,985,600, +16,384) ns
		{0.99, 49_496_064},         // rank 100: 49.5 ms, bucket [49,479,680, +32,768) ns
		{1, 50 * time.Millisecond}, // rank 101: the maximum, exact
	}
	for _, tt := range tests {
		if got := l.Quantile(tt.q); got != tt.want {
			t.Errorf("Quantile(%g) = %v, want %v", tt.q, got, tt.want)
		}
	}
	// Mean: 0.5 ms × (1 + … + 100) / 101 = 2525 ms / 101.
	if m, want := l.Mean(), 2525*time.Millisecond/101; m != want {
		t.Errorf("mean %v, want %v", m, want)
	}
	l.Reset()
	if l.Count() != 0 || l.Quantile(0.5) != 0 {
		t.Error("reset left observations")
	}
}

// TestLatenessQuantileNearestRank: the rank is ⌈q·n⌉ even when q·n is just
// above an integer (q = 0.1000000001 of 10 observations is rank 2).
func TestLatenessQuantileNearestRank(t *testing.T) {
	var l Lateness
	for i := 1; i <= 10; i++ {
		l.Observe(time.Duration(i) * time.Millisecond)
	}
	if got, want := l.Quantile(0.1000000001), time.Duration(2_000_384); got != want {
		t.Errorf("Quantile(0.1000000001) = %v, want %v (rank 2: 2 ms, bucket [1,999,872, +1,024) ns)", got, want)
	}
}

// BenchmarkLatenessObserve is the per-chunk cost of recording lateness
// from every core at once (exponential values, mean 2 ms).
func BenchmarkLatenessObserve(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	vs := make([]time.Duration, 1<<16)
	for i := range vs {
		vs[i] = time.Duration(r.ExpFloat64() * 2e6)
	}
	var l Lateness
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			l.Observe(vs[i&(len(vs)-1)])
			i++
		}
	})
}
