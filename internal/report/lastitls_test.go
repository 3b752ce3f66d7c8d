package report

import (
	"slices"
	"testing"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// TestCollectorLastITLs: the gaps Add computed for the record it was last
// given, by hand: chunks at 100, 110, 130 ms give 10 and 20 ms; with 1
// then 2 tokens a chunk, 10 ms then 10 and 10 ms. A failed record, a
// warm-up record left out, or another record than the last has none.
func TestCollectorLastITLs(t *testing.T) {
	ms := int64(1e6)
	ok := func(tokens ...int32) *latency.Record {
		return &latency.Record{SentNS: 50 * ms, FirstTokenNS: 100 * ms, EndNS: 130 * ms, OutputTokens: 3,
			ChunkNS: []int64{100 * ms, 110 * ms, 130 * ms}, ChunkTokens: tokens}
	}
	failed := &latency.Record{SentNS: 50 * ms, EndNS: 60 * ms, ErrorKind: latency.FailHTTP5xx}
	warm := ok()
	warm.Warmup = true
	tests := []struct {
		name   string
		rec    *latency.Record
		ask    func(last *latency.Record) *latency.Record // the record asked about
		want   []int64
		wantOK bool
	}{
		{"one token a chunk", ok(), nil, []int64{10 * ms, 20 * ms}, true},
		{"chunk counts", ok(1, 1, 2), nil, []int64{10 * ms, 10 * ms, 10 * ms}, true},
		{"failed", failed, nil, nil, false},
		{"warm-up left out", warm, nil, nil, false},
		{"not the last record", ok(), func(*latency.Record) *latency.Record { return ok() }, nil, false},
	}
	c := NewCollector(Options{})
	if _, got := c.LastITLs(ok()); got {
		t.Error("an empty collector has gaps")
	}
	for _, tt := range tests {
		c.Add(ok(1, 3)) // a record before: its gaps must not show
		c.Add(tt.rec)
		ask := tt.rec
		if tt.ask != nil {
			ask = tt.ask(tt.rec)
		}
		got, gotOK := c.LastITLs(ask)
		if gotOK != tt.wantOK || !slices.Equal(got, tt.want) {
			t.Errorf("%s: %v %v, want %v %v", tt.name, got, gotOK, tt.want, tt.wantOK)
		}
	}
}
