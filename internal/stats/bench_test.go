package stats

import (
	"math/rand/v2"
	"testing"
)

func benchValues() []int64 { return randomValues(rand.New(rand.NewPCG(1, 1)), 1<<16) }

func BenchmarkHistogramAdd(b *testing.B) {
	vs := benchValues()
	var h Histogram
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h.Add(vs[i&(len(vs)-1)])
	}
}

func BenchmarkConcurrentAdd(b *testing.B) {
	vs := benchValues()
	var c Concurrent
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			c.Add(vs[i&(len(vs)-1)])
			i++
		}
	})
}

func BenchmarkHistogramPercentile(b *testing.B) {
	h := histOf(benchValues())
	b.ReportAllocs()
	for b.Loop() {
		h.Percentile(99)
	}
}

func BenchmarkHistogramMerge(b *testing.B) {
	src := histOf(benchValues())
	var dst Histogram
	b.ReportAllocs()
	for b.Loop() {
		dst.Merge(src)
	}
}

func BenchmarkHistogramMarshal(b *testing.B) {
	h := histOf(benchValues())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.MarshalJSON(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPercentileSorted(b *testing.B) {
	vs := make([]int64, 1_000_000)
	for i := range vs {
		vs[i] = int64(i)
	}
	b.ReportAllocs()
	for b.Loop() {
		Percentile(vs, 99.9)
	}
}
