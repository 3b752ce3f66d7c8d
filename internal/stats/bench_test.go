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

func sketchOf(vs []int64) *Sketch {
	var s Sketch
	for _, v := range vs {
		s.Add(v)
	}
	return &s
}

func BenchmarkSketchAdd(b *testing.B) {
	vs := benchValues()
	var s Sketch
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.Add(vs[i&(len(vs)-1)])
	}
}

func BenchmarkSketchMerge(b *testing.B) {
	src := sketchOf(benchValues())
	var dst Sketch
	b.ReportAllocs()
	for b.Loop() {
		dst.Merge(src)
	}
}

// BenchmarkSketchResetMerge is the live window's cost per metric and tick:
// emptied, then ten one-second sketches merged in.
func BenchmarkSketchResetMerge(b *testing.B) {
	vs := benchValues()
	srcs := make([]*Sketch, 10)
	for k := range srcs {
		srcs[k] = sketchOf(vs[k*len(vs)/10 : (k+1)*len(vs)/10])
	}
	var dst Sketch
	b.ReportAllocs()
	for b.Loop() {
		dst.Reset()
		for _, s := range srcs {
			dst.Merge(s)
		}
	}
}

func BenchmarkSketchPercentiles(b *testing.B) {
	s := sketchOf(benchValues())
	b.ReportAllocs()
	for b.Loop() {
		s.Percentiles(50, 90, 99, 99.9)
	}
}
