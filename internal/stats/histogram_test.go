package stats

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestBucketLayout(t *testing.T) {
	tests := []struct {
		v         int64
		low, wide int64
	}{
		{0, 0, 1}, {1, 1, 1}, {1023, 1023, 1}, // exact below 1,024
		{1024, 1024, 1}, {2047, 2047, 1}, // [1024, 2048): still width 1
		{2048, 2048, 2}, {2049, 2048, 2}, {4095, 4094, 2},
		{4096, 4096, 4},
		{1_000_000, 999_936, 512}, // 2^19 ≤ v < 2^20: width 2^9
		{math.MaxInt64, 2047 << 52, 1 << 52},
	}
	for _, tt := range tests {
		i := bucketOf(tt.v)
		if bucketLow(i) != tt.low || bucketWidth(i) != tt.wide {
			t.Errorf("value %d: bucket [%d, +%d), want [%d, +%d)", tt.v, bucketLow(i), bucketWidth(i), tt.low, tt.wide)
		}
	}
	if bucketOf(math.MaxInt64) != maxIndex {
		t.Errorf("max index %d, want %d", bucketOf(math.MaxInt64), maxIndex)
	}
	// Buckets tile the integers: each starts where the previous ended.
	for i := 1; i <= maxIndex; i++ {
		if bucketLow(i) != bucketLow(i-1)+bucketWidth(i-1) {
			t.Fatalf("bucket %d starts at %d, previous ends at %d", i, bucketLow(i), bucketLow(i-1)+bucketWidth(i-1))
		}
	}
}

// TestHistogramByHand: 1..100 are exact (below 1,024); 1,000,000 (bucket
// [999,936, 1,000,448), midpoint 1,000,192) is read back as the midpoint
// unless it is the maximum.
func TestHistogramByHand(t *testing.T) {
	var h Histogram
	if h.Percentile(50) != 0 || h.Mean() != 0 || h.Count() != 0 {
		t.Error("empty histogram must read 0")
	}
	for v := int64(1); v <= 100; v++ {
		h.Add(v)
	}
	if h.Percentile(95) != 95 || h.Percentile(50) != 50 || h.Mean() != 50.5 || h.Min() != 1 || h.Max() != 100 {
		t.Errorf("1..100: p95 %d p50 %d mean %v min %d max %d", h.Percentile(95), h.Percentile(50), h.Mean(), h.Min(), h.Max())
	}
	h.Add(-7) // counts as 0
	if h.Min() != 0 || h.Count() != 101 || h.Sum() != 5050 {
		t.Errorf("negative value: min %d count %d sum %d", h.Min(), h.Count(), h.Sum())
	}
	var g Histogram
	g.Add(1_000_000)
	g.Add(1_000_000)
	g.Add(1_000_400)
	// p50 = rank 2 = 1,000,000, read as 1,000,192; p100 is the exact max.
	if g.Percentile(50) != 1_000_192 || g.Percentile(100) != 1_000_400 || g.Percentile(1) != 1_000_000 {
		t.Errorf("p50 %d p100 %d p1 %d", g.Percentile(50), g.Percentile(100), g.Percentile(1))
	}
	// Every value the same: exact at every p (the midpoint is clamped).
	var s Histogram
	for range 10 {
		s.Add(123_456_789)
	}
	if s.Percentile(50) != 123_456_789 || s.Percentile(99) != 123_456_789 {
		t.Errorf("constant: p50 %d p99 %d", s.Percentile(50), s.Percentile(99))
	}
}

// randomValues draws n latencies spread over nine orders of magnitude.
func randomValues(r *rand.Rand, n int) []int64 {
	vs := make([]int64, n)
	for i := range vs {
		vs[i] = int64(math.Exp(r.Float64() * math.Log(1e12)))
	}
	return vs
}

// TestHistogramErrorBound: every percentile from the histogram is within
// RelativeError of the exact nearest-rank percentile of the same values.
func TestHistogramErrorBound(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ps := []float64{0.1, 1, 10, 25, 50, 75, 90, 95, 99, 99.9, 99.99, 100}
	for trial := range 20 {
		vs := randomValues(r, 1+r.IntN(5000))
		if trial%4 == 0 { // ties
			for i := range vs {
				vs[i] = vs[i] / 1000 * 1000
			}
		}
		var h Histogram
		for _, v := range vs {
			h.Add(v)
		}
		sorted := slices.Sorted(slices.Values(vs))
		for _, p := range ps {
			want, got := Percentile(sorted, p), h.Percentile(p)
			if math.Abs(float64(got-want)) > float64(want)*RelativeError {
				t.Errorf("trial %d n %d p%v: %d, exact %d (%.6f off, bound %.6f)",
					trial, len(vs), p, got, want, math.Abs(float64(got-want))/float64(want), RelativeError)
			}
		}
		if h.Sum() != sum(vs) || h.Min() != sorted[0] || h.Max() != sorted[len(sorted)-1] {
			t.Errorf("trial %d: sum/min/max %d/%d/%d", trial, h.Sum(), h.Min(), h.Max())
		}
	}
}

func sum(vs []int64) int64 {
	var s int64
	for _, v := range vs {
		s += v
	}
	return s
}

func histOf(vs []int64) *Histogram {
	var h Histogram
	for _, v := range vs {
		h.Add(v)
	}
	return &h
}

// same reports whether two histograms hold the same values' counts and the
// same count, sum and extremes.
func same(a, b *Histogram) bool {
	if a.n != b.n || a.sum != b.sum || a.min != b.min || a.max != b.max {
		return false
	}
	if a.n == 0 {
		return true
	}
	top := bucketOf(a.max) + 1
	return slices.Equal(a.counts[:top], b.counts[:top])
}

func encode(t *testing.T, h *Histogram) string {
	t.Helper()
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestMergeIsTheUnion: values split at random over k machines, each
// machine's histogram merged in any order, give exactly the histogram of
// all the values (same percentiles, count, sum, extremes, same bytes).
func TestMergeIsTheUnion(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for trial := range 30 {
		vs := randomValues(r, r.IntN(3000))
		k := 1 + r.IntN(5)
		parts := make([]*Histogram, k)
		for i := range parts {
			parts[i] = &Histogram{}
		}
		for _, v := range vs {
			parts[r.IntN(k)].Add(v)
		}
		whole := histOf(vs)
		var merged Histogram
		for _, i := range r.Perm(k) {
			merged.Merge(parts[i])
		}
		if !same(&merged, whole) || (trial == 0 && encode(t, &merged) != encode(t, whole)) {
			t.Fatalf("trial %d: merged %s\nwhole %s", trial, encode(t, &merged), encode(t, whole))
		}
		for _, p := range []float64{1, 50, 99, 99.9, 100} {
			if merged.Percentile(p) != whole.Percentile(p) {
				t.Errorf("trial %d p%v: merged %d whole %d", trial, p, merged.Percentile(p), whole.Percentile(p))
			}
		}
		// Merging is associative: (a+b)+c = a+(b+c).
		if k >= 3 {
			ab := parts[0].Clone()
			ab.Merge(parts[1])
			ab.Merge(parts[2])
			bc := parts[1].Clone()
			bc.Merge(parts[2])
			a := parts[0].Clone()
			a.Merge(bc)
			if !same(ab, a) {
				t.Errorf("trial %d: merge not associative", trial)
			}
		}
	}
	// Merging nothing or an empty histogram changes nothing.
	h := histOf([]int64{5, 50, 5000})
	before := encode(t, h)
	h.Merge(nil)
	h.Merge(&Histogram{})
	if encode(t, h) != before {
		t.Error("merging an empty histogram changed it")
	}
}

func TestResetAndClone(t *testing.T) {
	h := histOf([]int64{3, 3_000_000, 9_000_000_000})
	c := h.Clone()
	h.Reset()
	if h.Count() != 0 || h.Percentile(50) != 0 || h.Sum() != 0 {
		t.Errorf("reset left %d values", h.Count())
	}
	for i, x := range h.counts {
		if x != 0 {
			t.Fatalf("reset left bucket %d = %d", i, x)
		}
	}
	h.Add(10)
	if h.Percentile(100) != 10 || c.Count() != 3 || c.Percentile(100) != 9_000_000_000 {
		t.Errorf("after reset: %d; clone count %d max %d", h.Percentile(100), c.Count(), c.Percentile(100))
	}
}

func TestSumSaturates(t *testing.T) {
	var h Histogram
	h.Add(math.MaxInt64)
	h.Add(math.MaxInt64)
	if h.Sum() != math.MaxInt64 || h.Percentile(50) != math.MaxInt64 {
		t.Errorf("sum %d p50 %d", h.Sum(), h.Percentile(50))
	}
	var c Concurrent
	c.Add(math.MaxInt64)
	c.Add(5)
	if c.Sum() != math.MaxInt64 {
		t.Errorf("concurrent sum %d", c.Sum())
	}
}

// TestConcurrentMatchesHistogram: values added from many goroutines give
// the same histogram as added one by one.
func TestConcurrentMatchesHistogram(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	vs := randomValues(r, 40000)
	var c Concurrent
	var wg sync.WaitGroup
	const workers = 8
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(vs); i += workers {
				c.Add(vs[i])
			}
		})
	}
	wg.Wait()
	got := c.Snapshot(nil)
	if diff := cmp.Diff(encode(t, histOf(vs)), encode(t, got)); diff != "" {
		t.Errorf("snapshot differs (-one by one +concurrent):\n%s", diff)
	}
	if c.Count() != int64(len(vs)) || c.Max() != slices.Max(vs) {
		t.Errorf("count %d max %d", c.Count(), c.Max())
	}
	// A snapshot into a used histogram replaces its contents.
	dst := histOf([]int64{1, 2, 3})
	c.Reset()
	c.Add(42)
	c.Add(-1)
	if s := c.Snapshot(dst); s != dst || s.Count() != 2 || s.Min() != 0 || s.Max() != 42 || s.Sum() != 42 {
		t.Errorf("snapshot after reset: %s", encode(t, s))
	}
	var empty Concurrent
	if s := empty.Snapshot(nil); s.Count() != 0 {
		t.Errorf("empty snapshot has %d", s.Count())
	}
}
