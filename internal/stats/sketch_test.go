package stats

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSketchLayout: exact below 128, then 128 buckets per power of two.
func TestSketchLayout(t *testing.T) {
	tests := []struct {
		v         int64
		low, wide int64
	}{
		{0, 0, 1}, {127, 127, 1}, {128, 128, 1}, {255, 255, 1},
		{256, 256, 2}, {257, 256, 2}, {1000, 1000, 4},
		{1_000_000, 999_424, 4096}, // 2^19 ≤ v < 2^20: width 2^12
		{math.MaxInt64, 255 << 55, 1 << 55},
	}
	for _, tt := range tests {
		i := layoutOf(tt.v, sketchBits)
		if layoutLow(i, sketchBits) != tt.low || layoutWidth(i, sketchBits) != tt.wide {
			t.Errorf("value %d: bucket [%d, +%d), want [%d, +%d)", tt.v, layoutLow(i, sketchBits), layoutWidth(i, sketchBits), tt.low, tt.wide)
		}
	}
	for i := 1; i <= layoutOf(math.MaxInt64, sketchBits); i++ {
		if layoutLow(i, sketchBits) != layoutLow(i-1, sketchBits)+layoutWidth(i-1, sketchBits) {
			t.Fatalf("bucket %d starts at %d, previous ends at %d", i, layoutLow(i, sketchBits), layoutLow(i-1, sketchBits)+layoutWidth(i-1, sketchBits))
		}
	}
}

// TestSketchByHand: 1,000,000 lies in [999,424, 1,003,520), read back as
// its midpoint 1,001,472 unless it is the first or last rank.
func TestSketchByHand(t *testing.T) {
	var s Sketch
	if got := s.Percentiles(50); got[0] != 0 || s.Mean() != 0 || s.Count() != 0 {
		t.Error("empty sketch must read 0")
	}
	for _, v := range []int64{1_000_000, 1_000_000, 1_000_000, 1_005_000} {
		s.Add(v)
	}
	got := s.Percentiles(1, 50, 100)
	if got[0] != 1_000_000 || got[1] != 1_001_472 || got[2] != 1_005_000 {
		t.Errorf("p1, p50, p100 %v, want [1000000 1001472 1005000]", got)
	}
	if s.Mean() != 1_001_250 || s.Max() != 1_005_000 {
		t.Errorf("mean %v max %d", s.Mean(), s.Max())
	}
	s.Add(-3) // counts as 0
	if got := s.Percentiles(1); got[0] != 0 || s.Count() != 5 {
		t.Errorf("negative value: p1 %d count %d", got[0], s.Count())
	}
	s.Reset()
	if s.Count() != 0 || s.Percentiles(50)[0] != 0 {
		t.Error("reset sketch must read 0")
	}
}

// TestSketchErrorBound: within SketchError of the exact nearest rank;
// merging two sketches reads as one sketch of every value.
func TestSketchErrorBound(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	ps := []float64{0.1, 1, 10, 50, 90, 99, 99.9, 100}
	for trial := range 20 {
		vs := randomValues(r, 1+r.IntN(5000))
		var a, b, all Sketch
		for i, v := range vs {
			all.Add(v)
			if i%3 == 0 {
				a.Add(v)
			} else {
				b.Add(v)
			}
		}
		a.Merge(&b)
		sorted := slices.Sorted(slices.Values(vs))
		got, merged := all.Percentiles(ps...), a.Percentiles(ps...)
		for k, p := range ps {
			want := Percentile(sorted, p)
			if math.Abs(float64(got[k]-want)) > float64(want)*SketchError {
				t.Errorf("trial %d n %d p%v: %d, exact %d (bound %.5f)", trial, len(vs), p, got[k], want, SketchError)
			}
			if merged[k] != got[k] {
				t.Errorf("trial %d p%v: merged %d, one sketch %d", trial, p, merged[k], got[k])
			}
		}
		if a.Mean() != all.Mean() || a.Max() != sorted[len(sorted)-1] || a.Count() != int64(len(vs)) {
			t.Errorf("trial %d: merged mean/max/count %v/%d/%d", trial, a.Mean(), a.Max(), a.Count())
		}
	}
}
