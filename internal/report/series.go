package report

import (
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/window"
)

// The report's windows (docs/metrics.md, "Windows"): 1 s, doubled until
// the run fits in seriesMax windows. Each window's samples cost up to about
// 1.5 MB (four histograms) on a long run: 30 keep report's 1,000,000
// records under 1 GiB (docs/performance.md).
const (
	seriesWidth = time.Second
	seriesMax   = 30
)

// newSeries is an empty series of the report's windows.
func newSeries() *window.Series { return window.New(seriesWidth, seriesMax) }

// TimeSeries is the run in fixed windows (internal/window): W wide, aligned
// at the run's start, each request in the window of its completion.
// Durations are milliseconds, instants seconds since the run's start.
type TimeSeries struct {
	WidthS float64 `json:"width_s"`
	// Gauges names the server's gauges the windows carry (waiting,
	// running, kv_cache_usage); empty when nothing was scraped.
	Gauges  []string      `json:"gauges,omitempty"`
	Windows []SeriesPoint `json:"windows"`
}

// SeriesPoint is one window.
type SeriesPoint struct {
	StartS      float64        `json:"start_s"`
	EndS        float64        `json:"end_s"`
	Offered     int            `json:"offered"`
	Completed   int            `json:"completed"`
	Failed      int            `json:"failed"`
	Failures    map[string]int `json:"failures,omitempty"`
	OfferedRPS  float64        `json:"offered_rps"`
	AchievedRPS float64        `json:"achieved_rps"`
	InFlight    float64        `json:"in_flight"`
	TTFT        WindowDist     `json:"ttft"`
	TPOT        WindowDist     `json:"tpot"`
	ITL         WindowDist     `json:"itl"`
	E2E         WindowDist     `json:"e2e"`
	// The means of the server's scrapes in the window (nil: none, or the
	// server does not expose the gauge).
	Waiting      *float64 `json:"waiting,omitempty"`
	Running      *float64 `json:"running,omitempty"`
	KVCacheUsage *float64 `json:"kv_cache_usage,omitempty"`
}

// WindowDist is a metric's percentiles in one window, milliseconds.
type WindowDist struct {
	Count  int64   `json:"count"`
	P50    float64 `json:"p50_ms"`
	P90    float64 `json:"p90_ms"`
	P99    float64 `json:"p99_ms"`
	Approx bool    `json:"approx,omitempty"`
}

func windowDist(p window.Percentiles) WindowDist {
	return WindowDist{Count: p.N, P50: ms(int64(p.P50)), P90: ms(int64(p.P90)), P99: ms(int64(p.P99)), Approx: p.Approx}
}

// useWidth makes the digest's series start at the collector's width, so
// that merging it coarsens nothing and its storage is kept for the next
// batch.
func (d *digest) useWidth(w time.Duration) {
	if d.series == nil {
		d.series = window.New(w, seriesMax)
	}
	d.series.Reset(w)
}

// addWindow counts a record in the digest's series, its instants moved
// onto the collector's clock by the digest's shift (a shard's).
func (d *digest) addWindow(r *latency.Record) {
	if d.series == nil {
		d.series = newSeries()
	}
	if d.shift == 0 {
		d.series.Add(r)
		return
	}
	s := &d.shifted
	*s = *r
	for _, p := range []*int64{&s.IntendedNS, &s.SentNS, &s.WroteNS, &s.FirstByteNS, &s.FirstReasonNS, &s.FirstTokenNS, &s.EndNS, &s.LastEventNS} {
		*p = shiftSet(*p, d.shift)
	}
	d.chunks = d.chunks[:0]
	for _, t := range r.ChunkNS {
		d.chunks = append(d.chunks, t+d.shift)
	}
	s.ChunkNS = d.chunks
	d.series.Add(s)
}
