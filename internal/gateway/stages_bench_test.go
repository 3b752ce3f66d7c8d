package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openaitest"
)

// BenchmarkStagesVsClientE2E sends 100 requests one after another per
// iteration, through the gateway to a fake upstream and to tokentrace
// serve, and reports how close the gateway's total comes to the E2E the
// client observes: the share within 1 ms, and the gap's P50, P99 and
// maximum (client ↔ gateway transit, the HTTP server's work outside the
// handler, and whatever else the machine was doing).
func BenchmarkStagesVsClientE2E(b *testing.B) {
	fake := func(b *testing.B) (string, func(int) string) {
		up := openaitest.Start(b, &openaitest.Upstream{Name: "a", Chunks: 5, TTFT: 2 * time.Millisecond, Gap: time.Millisecond, Timing: openaitest.Timing})
		return up.URL(), func(i int) string { return chatBody("m", i%2 == 0, "count the stages", "") }
	}
	sim := func(b *testing.B) (string, func(int) string) {
		return serveBase(startServe(b, time.Millisecond)), serveStagesBody
	}
	for _, c := range []struct {
		name     string
		upstream func(*testing.B) (string, func(int) string)
	}{{"fake", fake}, {"serve", sim}} {
		b.Run(c.name, func(b *testing.B) {
			url, body := c.upstream(b)
			g := quickGateway(b, url)
			gw := startGateway(b, g)
			var within, n int
			var gaps []time.Duration
			for b.Loop() {
				w, gs := stagesBatch(b, gw.URL, 100, body, true)
				within += w
				n += len(gs)
				gaps = append(gaps, gs...)
			}
			b.ReportMetric(100*float64(within)/float64(n), "%within-1ms")
			reportP50P99(b, "gap", gaps)
			b.ReportMetric(us(slices.Max(gaps)), "gap-max-µs")
		})
	}
}

// BenchmarkLargeEventStages streams 200 events of 64 KB that the upstream
// has all sent at once, to a client that reads at once, and reports each
// tail stage per request. The upstream never makes the gateway wait here,
// so decode is only the transport handing over the bytes; splitting them
// into events and inspecting them is the gateway's own work
// (post_process). Under -race the copying is many times slower, and it
// shows where it happens.
func BenchmarkLargeEventStages(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(roleChunk)
	for i := range 200 {
		fmt.Fprintf(&sb, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d %s\"}}]}\n\n", i, strings.Repeat("p", 64<<10))
	}
	sb.WriteString(doneEvent)
	body := sb.String()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, body)
	}))
	b.Cleanup(up.Close)
	gw := startGateway(b, quickGateway(b, up.URL))
	var decode, postp, bp, total time.Duration
	for b.Loop() {
		resp := post(b, context.Background(), gw.URL, chatBody("m", true, "x", ""), nil)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		st := timingMap(resp.Trailer.Get("Server-Timing"))
		decode += st[latency.TimingDecode]
		postp += st[latency.TimingPostProcess]
		bp += st[latency.TimingBackpressure]
		total += st["total"]
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 / n }
	b.ReportMetric(ms(decode), "decode-ms")
	b.ReportMetric(ms(postp), "post_process-ms")
	b.ReportMetric(ms(bp), "backpressure-ms")
	b.ReportMetric(ms(total), "total-ms")
}
