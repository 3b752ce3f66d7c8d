package bench

import (
	"testing"

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
	if n := joinPerfMetrics(recs, perf); n != 2 {
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
