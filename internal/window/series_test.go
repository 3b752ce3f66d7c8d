package window

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
)

const ms = int64(time.Millisecond)

// handRecords is the worked example of docs/metrics.md, "Windows".
func handRecords() []latency.Record {
	return []latency.Record{
		{ID: "a", IntendedNS: 100 * ms, SentNS: 100 * ms, FirstTokenNS: 300 * ms, EndNS: 900 * ms,
			ChunkNS: []int64{300 * ms, 500 * ms, 900 * ms}, ChunkTokens: []int32{1, 1, 1}, OutputTokens: 3},
		{ID: "b", IntendedNS: 500 * ms, SentNS: 600 * ms, FirstTokenNS: 1000 * ms, EndNS: 1200 * ms,
			ChunkNS: []int64{1000 * ms, 1200 * ms}, ChunkTokens: []int32{2, 1}, OutputTokens: 3},
		{ID: "c", IntendedNS: 1500 * ms, SentNS: 1500 * ms, FirstByteNS: 1800 * ms, ErrorKind: latency.FailHTTP5xx},
		{ID: "warm", Warmup: true, IntendedNS: 0, SentNS: 0, EndNS: 5000 * ms},
	}
}

func handGauges() []Gauge {
	return []Gauge{
		{At: 500 * time.Millisecond, Waiting: 2, Running: 1, KVUsage: 0.25},
		{At: 700 * time.Millisecond, Waiting: 4, Running: 3, KVUsage: 0.75},
		{At: 1500 * time.Millisecond, Waiting: 0, Running: 1, KVUsage: 0.5},
	}
}

func pct(n int64, p50, p90, p99 int64) Percentiles {
	return Percentiles{N: n, P50: time.Duration(p50 * ms), P90: time.Duration(p90 * ms), P99: time.Duration(p99 * ms)}
}

// TestWindowsByHand checks every figure of the worked example.
func TestWindowsByHand(t *testing.T) {
	sec := time.Second
	tests := []struct {
		name  string
		width time.Duration
		max   int
		end   time.Duration
		want  []Window
	}{
		{"1s windows", sec, 0, 0, []Window{
			{Start: 0, End: sec, Offered: 2, Completed: 1, OfferedRPS: 2, AchievedRPS: 1, InFlight: 1.2,
				TTFT: pct(1, 200, 200, 200), TPOT: pct(1, 300, 300, 300), ITL: pct(2, 200, 400, 400), E2E: pct(1, 800, 800, 800),
				Gauges: Gauges{Samples: 2, Waiting: 3, Running: 2, KVUsage: 0.5}},
			{Start: sec, End: 1800 * time.Millisecond, Offered: 1, Completed: 1, Failed: 1,
				Failures: map[latency.ErrorKind]int{latency.FailHTTP5xx: 1}, OfferedRPS: 1.25, AchievedRPS: 1.25, InFlight: 0.625,
				TTFT: pct(1, 400, 400, 400), TPOT: pct(1, 100, 100, 100), ITL: pct(2, 0, 200, 200), E2E: pct(1, 600, 600, 600),
				Gauges: Gauges{Samples: 1, Waiting: 0, Running: 1, KVUsage: 0.5}},
		}},
		{"doubled to 2s", sec, 1, 0, []Window{
			{Start: 0, End: 1800 * time.Millisecond, Offered: 3, Completed: 2, Failed: 1,
				Failures: map[latency.ErrorKind]int{latency.FailHTTP5xx: 1}, OfferedRPS: 3 / 1.8, AchievedRPS: 2 / 1.8, InFlight: 1.7 / 1.8,
				TTFT: pct(2, 200, 400, 400), TPOT: pct(2, 100, 300, 300), ITL: pct(4, 200, 400, 400), E2E: pct(2, 600, 800, 800),
				Gauges: Gauges{Samples: 3, Waiting: 2, Running: 5.0 / 3, KVUsage: 0.5}},
		}},
		{"explicit end", 2 * sec, 0, 3 * sec, []Window{
			{Start: 0, End: 2 * sec, Offered: 3, Completed: 2, Failed: 1,
				Failures: map[latency.ErrorKind]int{latency.FailHTTP5xx: 1}, OfferedRPS: 1.5, AchievedRPS: 1, InFlight: 0.85,
				TTFT: pct(2, 200, 400, 400), TPOT: pct(2, 100, 300, 300), ITL: pct(4, 200, 400, 400), E2E: pct(2, 600, 800, 800),
				Gauges: Gauges{Samples: 3, Waiting: 2, Running: 5.0 / 3, KVUsage: 0.5}},
			{Start: 2 * sec, End: 3 * sec},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(tt.width, tt.max)
			recs := handRecords()
			for i := len(recs) - 1; i >= 0; i-- { // any order
				s.Add(&recs[i])
			}
			for _, g := range handGauges() {
				s.AddGauge(g)
			}
			got := s.Windows(tt.end)
			if len(got) != len(tt.want) {
				t.Fatalf("%d windows, want %d: %+v", len(got), len(tt.want), got)
			}
			for i := range got {
				roundFloats(&got[i])
				roundFloats(&tt.want[i])
				if !reflect.DeepEqual(got[i], tt.want[i]) {
					t.Errorf("window %d:\n got %+v\nwant %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// roundFloats rounds a window's ratios to 1e-9 for comparison.
func roundFloats(w *Window) {
	for _, f := range []*float64{&w.OfferedRPS, &w.AchievedRPS, &w.InFlight, &w.Gauges.Waiting, &w.Gauges.Running, &w.Gauges.KVUsage} {
		*f = math.Round(*f*1e9) / 1e9
	}
}

func TestIndexAndCompletion(t *testing.T) {
	for _, tt := range []struct {
		t, w time.Duration
		want int
	}{{-5, time.Second, 0}, {0, time.Second, 0}, {999 * time.Millisecond, time.Second, 0}, {time.Second, time.Second, 1}, {5, 0, 0}} {
		if got := Index(tt.t, tt.w); got != tt.want {
			t.Errorf("Index(%v, %v) = %d, want %d", tt.t, tt.w, got, tt.want)
		}
	}
	r := latency.Record{SentNS: 10, FirstByteNS: 20, ChunkNS: []int64{30, 40}}
	if got := Completion(&r); got != 40 {
		t.Errorf("Completion without end = %v, want 40ns", got)
	}
	r.EndNS = 50
	if got := Completion(&r); got != 50 {
		t.Errorf("Completion = %v, want 50ns", got)
	}
}

func TestEmpty(t *testing.T) {
	if w := New(0, 0).Windows(0); w != nil {
		t.Errorf("empty series: %+v", w)
	}
	if New(0, 0).Width() != time.Second {
		t.Error("width ≤ 0 should count as 1 s")
	}
}

// TestMergeIsTheUnion: records split between two series and merged give
// the windows of one series that took them all, whatever the widths the
// parts had reached.
func TestMergeIsTheUnion(t *testing.T) {
	recs := handRecords()
	recs = append(recs, latency.Record{ID: "late", IntendedNS: 3500 * ms, SentNS: 3500 * ms, FirstTokenNS: 3600 * ms,
		EndNS: 3700 * ms, ChunkNS: []int64{3600 * ms}, OutputTokens: 1},
		latency.Record{ID: "noend", IntendedNS: 100 * ms, SentNS: 100 * ms, FirstTokenNS: 200 * ms})
	for _, max := range []int{0, 2, 3} {
		all := New(time.Second, max)
		for i := range recs {
			all.Add(&recs[i])
		}
		for cut := 0; cut <= len(recs); cut++ {
			a, b := New(time.Second, max), New(time.Second, max)
			for i := range recs {
				if i < cut {
					a.Add(&recs[i])
				} else {
					b.Add(&recs[i])
				}
			}
			a.Merge(b)
			if got, want := a.Windows(0), all.Windows(0); !reflect.DeepEqual(got, want) {
				t.Errorf("max %d, cut %d:\n got %+v\nwant %+v", max, cut, got, want)
			}
		}
	}
}

// TestNoEnd: a success without an end instant counts as failed, as the
// report counts it, in the window of its last instant.
func TestNoEnd(t *testing.T) {
	s := New(time.Second, 0)
	s.Add(&latency.Record{SentNS: 100 * ms, FirstTokenNS: 1200 * ms})
	w := s.Windows(0)
	if len(w) != 2 || w[1].Failed != 1 || w[1].Failures[NoEnd] != 1 || w[1].Completed != 0 {
		t.Errorf("windows %+v", w)
	}
}

// TestReset: a series reset and fed again gives what a new one does,
// whatever width it had reached.
func TestReset(t *testing.T) {
	recs := handRecords()
	fresh := New(time.Second, 0)
	for i := range recs {
		fresh.Add(&recs[i])
	}
	s := New(time.Second, 0)
	s.Merge(func() *Series { // a coarser past
		o := New(4*time.Second, 0)
		o.Add(&latency.Record{SentNS: 0, EndNS: 9000 * ms, ErrorKind: latency.FailTimeout})
		return o
	}())
	s.Reset(0)
	for i := range recs {
		s.Add(&recs[i])
	}
	if got, want := s.Windows(0), fresh.Windows(0); !reflect.DeepEqual(got, want) {
		t.Errorf("after Reset:\n got %+v\nwant %+v", got, want)
	}
}
