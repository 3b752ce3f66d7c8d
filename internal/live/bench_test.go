package live

import (
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/report"
)

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
