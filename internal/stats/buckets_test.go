package stats

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestResolutionsByHand reads the same eight values at both resolutions:
// 300, 300, 300, 1,000,000, 1,000,000, 1,005,000, 1,005,000, 1,005,000.
//   - 300: exact in a Histogram (below 1,024); in a Sketch it lies in
//     [300, 302) (width 2 in [256, 512)), read as 301.
//   - 1,000,000: [999,936, +512) in a Histogram, read as 1,000,192;
//     [999,424, +4,096) in a Sketch, read as 1,001,472.
//   - 1,005,000: [1,004,544, +512) in a Histogram, read as 1,004,800;
//     [1,003,520, +4,096) in a Sketch, whose midpoint 1,005,568 is
//     clamped to the maximum, 1,005,000.
//
// Ranks (n = 8): p1 → 1, p25 → 2, p50 → 4, p75 → 6, p100 → 8; the first
// and last rank read the exact minimum and maximum.
func TestResolutionsByHand(t *testing.T) {
	vs := []int64{300, 300, 300, 1_000_000, 1_000_000, 1_005_000, 1_005_000, 1_005_000}
	ps := []float64{1, 25, 50, 75, 100}
	tests := []struct {
		name string
		read func([]int64) ([]int64, *core)
		want []int64
	}{
		{"histogram", func(vs []int64) ([]int64, *core) {
			var h Histogram
			h.AddAll(vs)
			out := make([]int64, len(ps))
			for i, p := range ps {
				out[i] = h.Percentile(p)
			}
			return out, &h.core
		}, []int64{300, 300, 1_000_192, 1_004_800, 1_005_000}},
		{"sketch", func(vs []int64) ([]int64, *core) {
			var s Sketch
			s.AddAll(vs)
			return s.Percentiles(ps...), &s.core
		}, []int64{300, 301, 1_001_472, 1_005_000, 1_005_000}},
	}
	for _, tt := range tests {
		got, c := tt.read(vs)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: p1, p25, p50, p75, p100 %v, want %v", tt.name, got, tt.want)
		}
		if c.Count() != 8 || c.Sum() != 5_015_900 || c.Mean() != 626_987.5 || c.Min() != 300 || c.Max() != 1_005_000 {
			t.Errorf("%s: count %d sum %d mean %v min %d max %d", tt.name, c.Count(), c.Sum(), c.Mean(), c.Min(), c.Max())
		}
	}
}

// addOneByOne fills a store at resolution b value by value, as Add does.
func addOneByOne(c *core, b int, vs []int64) {
	for _, v := range vs {
		c.add(v, layoutOf(v, b))
	}
}

// sameCore reports whether two stores hold the same counts, count, sum
// and extremes.
func sameCore(a, b *core, bits int) bool {
	if a.n != b.n || a.sum != b.sum || a.min != b.min || a.max != b.max {
		return false
	}
	if a.n == 0 {
		return true
	}
	top := layoutOf(a.max, bits) + 1
	return slices.Equal(a.counts[:top], b.counts[:top])
}

// checkAddAll: AddAll of vs after AddAll of first gives the store that
// Add gives value by value, at both resolutions.
func checkAddAll(t *testing.T, first, vs []int64) {
	t.Helper()
	for _, b := range []int{subBits, sketchBits} {
		var one, all core
		addOneByOne(&one, b, first)
		addOneByOne(&one, b, vs)
		all.addAll(first, b)
		all.addAll(vs, b)
		if !sameCore(&one, &all, b) {
			t.Fatalf("%d bits, %v then %v: AddAll n %d sum %d min %d max %d, Add n %d sum %d min %d max %d",
				b, first, vs, all.n, all.sum, all.min, all.max, one.n, one.sum, one.min, one.max)
		}
	}
}

// TestAddAllIsAdd: adding a slice in one pass is adding its values one by
// one, into an empty store or not, negative values counting as 0.
func TestAddAllIsAdd(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	tests := []struct {
		name      string
		first, vs []int64
	}{
		{"nothing", nil, nil},
		{"empty slice after values", []int64{5, 9}, []int64{}},
		{"negative first", nil, []int64{-4, 7, 3}},
		{"all negative", nil, []int64{-1, -2}},
		{"grows past the storage", []int64{10}, []int64{1 << 40, 3, math.MaxInt64}},
		{"lower minimum later", []int64{1000, 2000}, []int64{1500, 2, 1 << 30}},
		{"random", randomValues(r, 300), randomValues(r, 700)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkAddAll(t, tt.first, tt.vs) })
	}
}

// FuzzAddAll: AddAll is Add value by value, whatever the values.
func FuzzAddAll(f *testing.F) {
	f.Add([]byte{1, 2, 3}, []byte{255, 0, 7, 7, 7, 7, 7, 7, 7, 128})
	f.Add([]byte{}, []byte{0x80, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		checkAddAll(t, fuzzValues(a), fuzzValues(b))
	})
}

// fuzzValues reads b as little-endian int64s (a short tail as a smaller
// value), at most 4,096 of them.
func fuzzValues(b []byte) []int64 {
	var vs []int64
	for len(b) > 0 && len(vs) < 4096 {
		var v uint64
		n := min(len(b), 8)
		for i := range n {
			v |= uint64(b[i]) << (8 * i)
		}
		vs = append(vs, int64(v))
		b = b[n:]
	}
	return vs
}
