package stats

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

func TestSampleMovesToHistogram(t *testing.T) {
	s := Sample{ExactCap: 10}
	for v := int64(1); v <= 10; v++ {
		s.Add(v * 1000)
	}
	if s.Hist() != nil || len(s.Values()) != 10 {
		t.Fatalf("up to the cap the sample must be exact")
	}
	got, approx := s.Percentiles(50, 99)
	if approx || got[0] != 5000 || got[1] != 10000 {
		t.Errorf("exact percentiles %v approx %v", got, approx)
	}
	snap := s.Snapshot()
	for v := int64(11); v <= 100; v++ {
		s.Add(v * 1000)
	}
	if s.Hist() == nil || s.Values() != nil || s.Count() != 100 || s.Mean() != 50500 {
		t.Fatalf("after the cap the sample must move to the histogram: count %d mean %v", s.Count(), s.Mean())
	}
	got, approx = s.Percentiles(50)
	if !approx || math.Abs(float64(got[0]-50000)) > 50000*RelativeError {
		t.Errorf("p50 %d (approx %v), want ≈ 50000", got[0], approx)
	}
	if snap.Count() != 10 || len(snap.Values()) != 10 {
		t.Errorf("the snapshot changed: %d", snap.Count())
	}
}

// TestSampleAddBatch: batches merged as histograms once past the cap give
// the histogram of every value, as if added one by one.
func TestSampleAddBatch(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	one, batched := Sample{ExactCap: 500}, Sample{ExactCap: 500}
	values := Sample{ExactCap: 500} // batches given as values only
	var all []int64
	for range 20 {
		vs := append(randomValues(r, r.IntN(100)), -3)
		all = append(all, vs...)
		for _, v := range vs {
			one.Add(v)
		}
		batched.AddBatch(vs, histOf(vs))
		values.AddBatch(vs, nil)
	}
	if one.Hist() == nil || batched.Hist() == nil || values.Hist() == nil {
		t.Fatal("all must have left exact mode")
	}
	for _, b := range []*Sample{&batched, &values} {
		if encode(t, one.Hist()) != encode(t, b.Hist()) || b.Count() != int64(len(all)) || one.Mean() != b.Mean() {
			t.Error("batched and one-by-one samples differ")
		}
	}
	// Exact values only, no histogram.
	s := Sample{ExactCap: 5}
	s.AddBatch([]int64{1, 2, 3}, nil)
	s.AddBatch([]int64{4, 5, 6}, nil)
	if s.Hist() == nil || s.Count() != 6 || s.Hist().Percentile(100) != 6 {
		t.Errorf("values past the cap without a histogram: count %d", s.Count())
	}
	// The zero value keeps DefaultExactCap values.
	var z Sample
	for i := range int64(DefaultExactCap) {
		z.Add(i)
	}
	if z.Hist() != nil {
		t.Error("the zero sample left exact mode before DefaultExactCap values")
	}
	if z.Add(1); z.Hist() == nil {
		t.Error("the zero sample kept more than DefaultExactCap values")
	}
}

// TestSampleResetReusesHistogram: a sample reset after it moved to a
// histogram counts exactly again, then in an emptied histogram: the same
// percentiles as a new sample, and a snapshot taken before is unchanged.
func TestSampleResetReusesHistogram(t *testing.T) {
	s := Sample{ExactCap: 4}
	for v := int64(1); v <= 10; v++ {
		s.Add(v * 1000)
	}
	snap := s.Snapshot()
	s.Reset()
	fresh := Sample{ExactCap: 4}
	for v := int64(1); v <= 6; v++ {
		s.Add(v * 7)
		fresh.Add(v * 7)
	}
	got, _ := s.Percentiles(50, 99)
	want, _ := fresh.Percentiles(50, 99)
	if s.Count() != 6 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("after Reset: n %d, P50/P99 %v, want 6, %v", s.Count(), got, want)
	}
	if p, _ := snap.Percentiles(100); snap.Count() != 10 || p[0] != 10000 {
		t.Errorf("snapshot changed: n %d, max %v", snap.Count(), p)
	}
}

// TestSampleGrowthAllocates checks that a sample growing one value at a
// time allocates at most about twice the storage it ends with.
func TestSampleGrowthAllocates(t *testing.T) {
	const n = 300_000
	s := Sample{ExactCap: 1 << 21}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range n {
		s.Add(int64(i))
	}
	runtime.ReadMemStats(&after)
	final := int64(cap(s.Values())) * 8
	if got := int64(after.TotalAlloc - before.TotalAlloc); got > 2*final+64<<10 {
		t.Errorf("growing to %d values allocated %d B, more than twice the %d B it ends with", n, got, final)
	}
	if s.Count() != n || len(s.Values()) != n {
		t.Errorf("count %d, values %d", s.Count(), len(s.Values()))
	}
}
