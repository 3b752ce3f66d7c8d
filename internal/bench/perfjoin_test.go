package bench

import (
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// TestJoinPerfMetrics joins by the engine id an answer's id carries, and
// only into successful records without a split of their own.
func TestJoinPerfMetrics(t *testing.T) {
	perf := []latency.TRTLLMPerf{
		{RequestID: "7", Split: &latency.ServerSplit{QueueNS: 5, Source: latency.SourceTRTLLMPerfMetrics}},
		{RequestID: "8", Split: &latency.ServerSplit{QueueNS: 6, Source: latency.SourceTRTLLMPerfMetrics}},
		{RequestID: "9", Split: &latency.ServerSplit{QueueNS: 7, Source: latency.SourceTRTLLMPerfMetrics}},
	}
	own := &latency.ServerSplit{QueueNS: 1, Source: latency.SourceServerTiming}
	recs := []*latency.Record{
		{ID: "a", ServerID: "chatcmpl-7"},
		{ID: "b", ServerID: "cmpl-8"},
		{ID: "c", ServerID: "chatcmpl-9", Server: own},
		{ID: "d", ServerID: "chatcmpl-7", ErrorKind: latency.FailServer},
		{ID: "e", ServerID: "chatcmpl-3fa85f64"},
		{ID: "f"},
	}
	if n := joinPerfMetrics(recs, perf, map[int]bool{}); n != 2 {
		t.Errorf("joined %d, want 2", n)
	}
	for i, want := range []int64{5, 6, 1, -1, -1, -1} {
		got := int64(-1)
		if recs[i].Server != nil {
			got = recs[i].Server.QueueNS
		}
		if got != want {
			t.Errorf("record %s: queue %d, want %d", recs[i].ID, got, want)
		}
	}
	if recs[0].Server == perf[0].Split {
		t.Error("the record shares the perf record's split")
	}
}

// TestJoinPerfByTime joins whole answers by their instants, with the
// server's steady clock 1,000 s ahead of the run's (err 0: a slack of
// 1 ms). Request a (sent 0, ended 100 ms) has one fit, record 0 (arrival
// 1 ms, last token 95 ms). b and c (sent 50 and 50.2 ms, ended 150 and
// 150.3 ms) both fit records 1 and 2 (arrivals 50.1 and 50.3 ms, last
// tokens 149 and 150.2 ms: scores 1.1 and 0.3 ms for b, within twice the
// slack) whose queues disagree (20 and 30 ms): neither is joined. f and g
// (sent 200 and 200.1 ms, ended 260 and 260.2 ms) fit records 4 and 5
// alike, whose splits agree within the slack (queue 5 and 5.5 ms): both
// are joined, either way round. d (300–400 ms) has no fit; e has its own
// split; record 3 was joined by id already.
func TestJoinPerfByTime(t *testing.T) {
	rec := func(id string, sent, end float64) *latency.Record {
		return &latency.Record{ID: id, SentNS: int64(sent * 1e6), EndNS: int64(end * 1e6)}
	}
	perf := func(q, arrival, done float64) latency.TRTLLMPerf {
		return latency.TRTLLMPerf{Split: &latency.ServerSplit{QueueNS: int64(q * 1e6), Source: latency.SourceTRTLLMPerfMetrics},
			ArrivalS: 1000 + arrival/1e3, DoneS: 1000 + done/1e3}
	}
	recs := []*latency.Record{rec("a", 0, 100), rec("b", 50, 150), rec("c", 50.2, 150.3), rec("d", 300, 400), rec("e", 0, 100),
		rec("f", 200, 260), rec("g", 200.1, 260.2)}
	recs[4].Server = &latency.ServerSplit{QueueNS: 1e6}
	ps := []latency.TRTLLMPerf{perf(10, 1, 95), perf(20, 50.1, 149), perf(30, 50.3, 150.2), perf(40, 0.5, 99),
		perf(5, 200.2, 259.9), perf(5.5, 200.3, 260)}
	used := map[int]bool{3: true}
	if n := joinPerfByTime(recs, ps, used, steadyClock{offset: 1000 * time.Second}); n != 3 {
		t.Errorf("joined %d, want 3", n)
	}
	for i, want := range []float64{10, -1, -1, -1, 1} {
		got := -1.0
		if recs[i].Server != nil {
			got = float64(recs[i].Server.QueueNS) / 1e6
		}
		if got != want {
			t.Errorf("record %s: queue %v ms, want %v", recs[i].ID, got, want)
		}
	}
	for _, r := range recs[5:] {
		if r.Server == nil || (r.Server.QueueNS != 5e6 && r.Server.QueueNS != 5.5e6) {
			t.Errorf("record %s: split %+v, want record 4's or 5's", r.ID, r.Server)
		}
	}
	if !used[0] || used[1] || used[2] || !used[4] || !used[5] {
		t.Errorf("used %v", used)
	}
}
