package serve

import (
	"testing"
	"time"
)

// TestLatenessQuantiles: the values 0 and 0.5 ms × i for i = 1..100 (101
// observations). The q-quantile is the observation of rank ⌈q·101⌉, reported
// as its bucket's upper edge (10 µs buckets below 10 ms, 100 µs above),
// capped at the maximum.
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
		{0.01, 510 * time.Microsecond},   // rank 2: 0.5 ms, bucket [500, 510) µs
		{0.5, 25100 * time.Microsecond},  // rank 51: 25 ms, bucket [25.0, 25.1) ms
		{0.99, 49600 * time.Microsecond}, // rank 100: 49.5 ms, bucket [49.5, 49.6) ms
		{1, 50 * time.Millisecond},       // rank 101: 50 ms, bucket edge 50.1 ms capped at the max
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
	if got, want := l.Quantile(0.1000000001), 2010*time.Microsecond; got != want {
		t.Errorf("Quantile(0.1000000001) = %v, want %v (rank 2: 2 ms, bucket [2.00, 2.01) ms)", got, want)
	}
}
