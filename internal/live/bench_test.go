package live

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/process"
	"github.com/tokentrace/tokentrace/internal/report"
)

// cpuTime is the process's CPU time so far, every thread's (process.SelfCPU).
var cpuTime = process.SelfCPU

// BenchmarkBoardRecord is the live machinery's cost per record as bench
// pays it at 1,000 records a second: the hand-over (Done), the
// aggregation, a snapshot each second of the run's clock and the
// since-start numbers and findings on their cadence (the run's clock
// advances 1 ms per record). Each record streams 128 tokens. Besides
// ns/op (wall, which a loaded machine inflates) it reports cpu-ns/op: the
// process's CPU time per record (GC included).
func BenchmarkBoardRecord(b *testing.B) {
	slos, _ := latency.ParseSLOs("ttft:p99<=500ms,tpot:p99<=50ms")
	recs := benchRecords()
	board := New(Config{Report: report.Options{SLOs: slos}, CPU: cpuTime})
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	var now int64
	for i := range b.N {
		board.Sent()
		board.Done(recs[i%len(recs)])
		now += msNS
		if now%int64(time.Second) == 0 {
			board.step(now, false)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkCollectorAdd is the report's own cost per record, which bench
// pays with or without the board (the board moves it off the record
// path): BenchmarkBoardRecord less this is what the live view adds.
func BenchmarkCollectorAdd(b *testing.B) {
	recs := benchRecords()
	coll := report.NewCollector(report.Options{})
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := range b.N {
		coll.Add(recs[i%len(recs)])
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkWindowAdd is the board's own work per record, the report's
// left out (BenchmarkCollectorAdd): the record counted in its second of
// the sliding window (four sketches, 127 gaps, the stage split) and in
// the run's TTFT sketch.
func BenchmarkWindowAdd(b *testing.B) {
	recs := benchRecords()
	board := New(Config{})
	board.agg.coll, board.agg.win.gaps = nil, nil // the report's share, measured on its own
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := range b.N {
		board.agg.add(recs[i%len(recs)])
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkWindowAddShared is BenchmarkWindowAdd with each record's gaps
// given, as the report's collector gives them (Collector.LastITLs) when
// the board feeds it.
func BenchmarkWindowAddShared(b *testing.B) {
	recs := benchRecords()
	gaps := make([][]int64, len(recs))
	for i, r := range recs {
		gaps[i] = r.ITLs(nil)
	}
	board := New(Config{})
	board.agg.coll = nil
	var cur int
	board.agg.win.gaps = func(*latency.Record) ([]int64, bool) { return gaps[cur], true }
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := range b.N {
		cur = i % len(recs)
		board.agg.add(recs[cur])
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// spreadRecords are 1,000 records of 128 tokens whose TTFT and gaps are
// drawn log-uniformly (1 ms to 3 s; 10 µs to 0.5 s), a fixed draw.
func spreadRecords() []*latency.Record {
	r := rand.New(rand.NewPCG(1, 2))
	draw := func(lo, hi float64) int64 { return int64(lo * math.Exp(r.Float64()*math.Log(hi/lo))) }
	recs := make([]*latency.Record, 1000)
	for i := range recs {
		sent := int64(i) * msNS
		chunks := make([]int64, 128)
		chunks[0] = sent + draw(1e6, 3e9)
		for k := 1; k < len(chunks); k++ {
			chunks[k] = chunks[k-1] + draw(1e4, 5e8)
		}
		recs[i] = streamed(sent, chunks...)
	}
	return recs
}

// benchRecords are 1,000 records of 128 streamed tokens each.
func benchRecords() []*latency.Record {
	recs := make([]*latency.Record, 1000)
	for i := range recs {
		sent := int64(i) * msNS
		chunks := make([]int64, 128)
		chunks[0] = sent + int64(20+i%50)*msNS
		for k := 1; k < len(chunks); k++ {
			chunks[k] = chunks[k-1] + int64(8+(i+k)%5)*msNS
		}
		recs[i] = streamed(sent, chunks...)
		recs[i].InputTokens = 512
	}
	return recs
}

// BenchmarkBoardTick is one tick's snapshot with no record taken since
// the last: the window (10 s of 100 records a second, latencies spread as
// on a loaded machine: TTFT 1 ms to 3 s, gaps 10 µs to 0.5 s) merged and
// read, the history point, the JSON of the event; the since-start numbers
// are not due.
func BenchmarkBoardTick(b *testing.B) {
	recs := spreadRecords()
	board := New(Config{})
	var now int64
	for i := range 1000 {
		board.Sent()
		board.Done(recs[i])
		now += 10 * msNS
		if now%int64(time.Second) == 0 {
			board.step(now, false)
		}
	}
	board.agg.nextReport = math.MaxInt64
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for range b.N {
		board.step(now, false)
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkSinceStart is one recomputation of the since-start numbers and
// findings over n records.
func BenchmarkSinceStart(b *testing.B) {
	recs := benchRecords()
	for _, n := range []int{1000, 10000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			board := New(Config{})
			for i := range n {
				board.Done(recs[i%len(recs)])
			}
			board.step(int64(time.Second), false)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for range b.N {
				board.agg.fromReport(int64(time.Second))
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkGatewayBoardRecord is the gateway view's cost per record at
// 1,000 records a second: the hand-off (Offer), the window, the record's
// pool and upstream rows (two upstreams), a snapshot each second of the
// run's clock. Each record streams 128 tokens.
func BenchmarkGatewayBoardRecord(b *testing.B) {
	recs := benchRecords()
	board := New(Config{Gateway: true})
	labs := []Labels{{Pool: "p", Upstream: "http://a:8000", Admitted: true, Status: 200},
		{Pool: "p", Upstream: "http://b:8000", Admitted: true, Status: 200}}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	var now int64
	for i := range b.N {
		board.Offer(recs[i%len(recs)], labs[i%2])
		now += msNS
		if now%int64(time.Second) == 0 {
			board.step(now, false)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}
