package gateway

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// handTimeline is the worked example of docs/metrics.md, "Gateway stages".
func handTimeline() *timeline {
	t0 := time.Unix(1000, 0)
	us := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Microsecond) }
	return &timeline{
		start: t0, in: us(100), admitted: us(100), conn: us(150), firstTok: us(20150), end: us(100200),
		post: 30 * time.Microsecond, backpressure: 20 * time.Microsecond,
		serverQueue: 5 * time.Millisecond, serverPrefill: 10 * time.Millisecond, serverSplit: true,
	}
}

func TestStagesPartitionByHand(t *testing.T) {
	tl := handTimeline()
	got := tl.stages()
	want := stageDurations{In: 100 * time.Microsecond, Connect: 50 * time.Microsecond, UpstreamTTFT: 20 * time.Millisecond,
		Decode: 80 * time.Millisecond, Post: 30 * time.Microsecond, Backpressure: 20 * time.Microsecond}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("stages (-want +got):\n%s", d)
	}
	if got.sum() != 100200*time.Microsecond {
		t.Errorf("sum %v, want E2E 100.2 ms", got.sum())
	}
	if h := headerTiming(got); h != "gateway_in;dur=0.100, gateway_queue;dur=0.000, connect;dur=0.050, upstream_ttft;dur=20.000" {
		t.Errorf("header timing %q", h)
	}
	if tr := tl.trailerTiming(got); tr != "decode;dur=80.000, post_process;dur=0.030, backpressure;dur=0.020, server_queue;dur=5.000, prefill;dur=10.000, network;dur=5.000, total;dur=100.200" {
		t.Errorf("trailer timing %q", tr)
	}
	// A request rejected in the queue: unreached instants collapse, the
	// partition still sums to end − start.
	r := &timeline{start: tl.start, in: tl.in, end: tl.start.Add(3 * time.Millisecond)}
	if s := r.stages(); s.sum() != 3*time.Millisecond || s.In != 100*time.Microsecond || s.Decode != 2900*time.Microsecond {
		t.Errorf("rejected request stages %+v", s)
	}
}

// TestChunkGapsAndITLsByHand: three content events 10 ms apart carrying
// 2, 2 and 3 tokens give chunk gaps 10, 10 ms and the ITLs 0 (the first
// event's second token), 5, 5, then 10/3 ms three times (3 333 334 +
// 3 333 333 + 3 333 333 ns): 6 gaps summing to 20 ms.
func TestChunkGapsAndITLsByHand(t *testing.T) {
	m := NewMetrics()
	tl := handTimeline()
	m.observe(&observation{pool: "p", model: "m", status: 200, stream: true, stages: tl.stages(), tl: tl,
		ttft: time.Millisecond, outTokens: 7, chunkNS: []int64{1e6, 11e6, 21e6}, chunkTokens: []int32{2, 2, 3}})
	for _, c := range []struct {
		name  string
		h     *prometheus.HistogramVec
		count uint64
		sum   float64
	}{{"chunk gap", m.ChunkGap, 2, 0.020}, {"itl", m.ITL, 6, 0.020}} {
		var d dto.Metric
		if err := c.h.WithLabelValues("p", "m").(prometheus.Histogram).Write(&d); err != nil {
			t.Fatal(err)
		}
		if got := d.GetHistogram().GetSampleCount(); got != c.count {
			t.Errorf("%s: %d samples, want %d", c.name, got, c.count)
		}
		if got := d.GetHistogram().GetSampleSum(); got < c.sum-1e-9 || got > c.sum+1e-9 {
			t.Errorf("%s: sum %v s, want %v", c.name, got, c.sum)
		}
	}
}
