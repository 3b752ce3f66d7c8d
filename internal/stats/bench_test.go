package stats

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/process"
)

// cpuTime is the process's CPU time so far, every thread's (process.SelfCPU).
var cpuTime = process.SelfCPU

// cpuPerOp reports the process's CPU time per op since cpu0 (cpu-ns/op):
// on a loaded machine it says what the work cost when ns/op does not.
func cpuPerOp(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

func benchValues() []int64 { return randomValues(rand.New(rand.NewPCG(1, 1)), 1<<16) }

func BenchmarkHistogramAdd(b *testing.B) {
	vs := benchValues()
	var h Histogram
	b.ReportAllocs()
	cpu0 := cpuTime()
	for i := 0; b.Loop(); i++ {
		h.Add(vs[i&(len(vs)-1)])
	}
	cpuPerOp(b, cpu0)
}

// BenchmarkHistogramAddAll is AddAll of 128 values at a time (one
// record's gaps), per value.
func BenchmarkHistogramAddAll(b *testing.B) {
	vs := benchValues()
	var h Histogram
	b.ReportAllocs()
	cpu0 := cpuTime()
	for i := 0; b.Loop(); i++ {
		o := i * 128 & (len(vs) - 1)
		h.AddAll(vs[o : o+128])
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/128, "cpu-ns/value")
}

func BenchmarkConcurrentAdd(b *testing.B) {
	vs := benchValues()
	var c Concurrent
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			c.Add(vs[i&(len(vs)-1)])
			i++
		}
	})
	cpuPerOp(b, cpu0)
}

func BenchmarkHistogramPercentile(b *testing.B) {
	h := histOf(benchValues())
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		h.Percentile(99)
	}
	cpuPerOp(b, cpu0)
}

func BenchmarkHistogramMerge(b *testing.B) {
	src := histOf(benchValues())
	var dst Histogram
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		dst.Merge(src)
	}
	cpuPerOp(b, cpu0)
}

func BenchmarkHistogramMarshal(b *testing.B) {
	h := histOf(benchValues())
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		if _, err := h.MarshalJSON(); err != nil {
			b.Fatal(err)
		}
	}
	cpuPerOp(b, cpu0)
}

func BenchmarkPercentileSorted(b *testing.B) {
	vs := make([]int64, 1_000_000)
	for i := range vs {
		vs[i] = int64(i)
	}
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		Percentile(vs, 99.9)
	}
	cpuPerOp(b, cpu0)
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
	cpu0 := cpuTime()
	for i := 0; b.Loop(); i++ {
		s.Add(vs[i&(len(vs)-1)])
	}
	cpuPerOp(b, cpu0)
}

// BenchmarkSketchAddAll is AddAll of 128 values at a time (one record's
// gaps), per value.
func BenchmarkSketchAddAll(b *testing.B) {
	vs := benchValues()
	var s Sketch
	b.ReportAllocs()
	cpu0 := cpuTime()
	for i := 0; b.Loop(); i++ {
		o := i * 128 & (len(vs) - 1)
		s.AddAll(vs[o : o+128])
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/128, "cpu-ns/value")
}

func BenchmarkSketchMerge(b *testing.B) {
	src := sketchOf(benchValues())
	var dst Sketch
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		dst.Merge(src)
	}
	cpuPerOp(b, cpu0)
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
	cpu0 := cpuTime()
	for b.Loop() {
		dst.Reset()
		for _, s := range srcs {
			dst.Merge(s)
		}
	}
	cpuPerOp(b, cpu0)
}

func BenchmarkSketchPercentiles(b *testing.B) {
	s := sketchOf(benchValues())
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		s.Percentiles(50, 90, 99, 99.9)
	}
	cpuPerOp(b, cpu0)
}
