package stats

import (
	"math"
	"testing"
	"time"
)

func TestRankByHand(t *testing.T) {
	tests := []struct {
		name string
		p    float64
		n    int64
		want int64
	}{
		{"empty", 50, 0, 0},
		{"negative n", 50, -3, 0},
		{"n=1 p50", 50, 1, 1},
		{"n=1 p0.001", 0.001, 1, 1},
		{"n=1 p100", 100, 1, 1},
		{"n=2 p50", 50, 2, 1},           // ⌈1.0⌉
		{"n=2 p50.0001", 50.0001, 2, 2}, // ⌈1.000002⌉
		{"n=2 p99", 99, 2, 2},           // ⌈1.98⌉
		{"p0 is the minimum", 0, 10, 1},
		{"negative p is the minimum", -5, 10, 1},
		{"NaN p is the minimum", math.NaN(), 10, 1},
		{"p100 is the maximum", 100, 10, 10},
		{"p above 100 is the maximum", 120, 10, 10},
		{"exactly k/n", 30, 10, 3},                     // ⌈3⌉, not 4
		{"0.95 × 100 is 95", 95, 100, 95},              // 95.00000000000001 before rounding
		{"just above k/n", 10.00000001, 10, 2},         // ⌈1.000000001⌉
		{"within 1e-9 of k/n", 10.000000000001, 10, 1}, // 1.0000000000001 rounds to 1
		{"p99.9 of 1000", 99.9, 1000, 999},             // 999.0000000000001 before rounding
		{"p99.9 of 100", 99.9, 100, 100},               // ⌈99.9⌉
		{"p2.5 of 2000", 2.5, 2000, 50},
		{"p97.5 of 2000", 97.5, 2000, 1950},
		{"large n", 99, 1 << 40, int64(math.Ceil(0.99 * (1 << 40)))},
	}
	for _, tt := range tests {
		if got := Rank(tt.p, tt.n); got != tt.want {
			t.Errorf("%s: Rank(%v, %d) = %d, want %d", tt.name, tt.p, tt.n, got, tt.want)
		}
	}
}

// TestPercentileNearestRank is docs/metrics.md's worked example and its
// edge cases.
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
		{"two p50", []int64{3, 9}, 50, 3},
		{"two p51", []int64{3, 9}, 51, 9},
		{"ties", []int64{1, 4, 4, 4, 9}, 40, 4}, // rank 2: a tied value, whichever copy
		{"ties p80", []int64{1, 4, 4, 4, 9}, 80, 4},
		{"ties p81", []int64{1, 4, 4, 4, 9}, 81, 9},
		{"empty", nil, 50, 0},
	}
	for _, tt := range tests {
		if got := Percentile(tt.sample, tt.p); got != tt.want {
			t.Errorf("%s: Percentile(%v) = %d, want %d", tt.name, tt.p, got, tt.want)
		}
	}
	// Any ordered type: durations and floats.
	if got := Percentile([]time.Duration{time.Millisecond, 2 * time.Millisecond}, 99); got != 2*time.Millisecond {
		t.Errorf("durations: %v", got)
	}
	if got := Percentile([]float64{-1.5, 0, 2.25}, 34); got != 0 {
		t.Errorf("floats: %v", got)
	}
}

func TestMean(t *testing.T) {
	if m := Mean([]int64{1, 2, 3, 4}); m != 2.5 {
		t.Errorf("mean %v", m)
	}
	if m := Mean([]float64(nil)); m != 0 {
		t.Errorf("empty mean %v", m)
	}
}
