package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/browsertest"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// TestLivePageInBrowser runs bench --live against the embedded engine
// and watches the page in headless Chromium (driven over its DevTools
// pipe): the page updates over SSE while the run goes, its final
// since-start numbers are the report's exactly, and a screenshot at
// 1280×800 is saved (go test -run LivePage -artifacts -outputdir DIR
// keeps it).
func TestLivePageInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine and a browser")
	}
	browser := browsertest.Find()
	if browser == "" {
		t.Skip("no Chromium installed (apt-get install chromium); skipping the browser test of the live page")
	}
	srv := startSim(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	page := "http://" + ln.Addr().String() + "/"
	cfg := Config{
		Target:   Target{BaseURL: srv.URL(), Endpoint: EndpointChat, Stream: true, ContinuousUsage: true, Timeout: time.Minute},
		Workload: &workload.Synthetic{Chat: true, Input: workload.Fixed(256), Output: workload.Uniform{Lo: 16, Hi: 96}, Turns: 1, Seed: 5},
		Load:     workload.Load{Rate: 12, Arrival: workload.Poisson, Duration: 8 * time.Second, Seed: 2},
		SLOs:     mustSLOs(t, "ttft:p99<=250ms,e2e:p99<=3s"),
		OutDir:   filepath.Join(t.TempDir(), "run"), Command: []string{"tokentrace", "bench", "--live"},
		SkipCalibration: true, Live: ln, LiveWindow: 4 * time.Second, ScrapeInterval: time.Second,
	}
	b := browsertest.Start(t, browser)
	type result struct {
		res *Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := Run(context.Background(), cfg, io.Discard)
		done <- result{res, err}
	}()
	waitFor(t, func() bool { return httpOK(page + "snapshot.json") })
	b.Call(t, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": false})
	b.Call(t, "Page.navigate", map[string]any{"url": page})

	// It updates: the snapshot it shows moves on, through its events.
	waitFor(t, func() bool { return b.Eval(t, "document.body.dataset.seq") != "" })
	seq0, _ := strconv.Atoi(b.Eval(t, "document.body.dataset.seq"))
	waitFor(t, func() bool {
		seq, _ := strconv.Atoi(b.Eval(t, "document.body.dataset.seq"))
		events, _ := strconv.Atoi(b.Eval(t, "document.body.dataset.events"))
		return seq >= seq0+2 && events >= 2
	})
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	waitFor(t, func() bool { return b.Eval(t, "document.body.dataset.final") == "true" })

	// Its final since-start numbers are the report's.
	rep := r.res.Report
	sum := rep.Summary
	want := map[string]float64{"s-requests": float64(sum.Requests), "s-succeeded": float64(sum.Succeeded), "s-failed": float64(sum.Failed),
		"s-offered": sum.OfferedRPS, "s-achieved": sum.ThroughputRPS}
	for _, d := range rep.Metrics {
		switch d.Metric {
		case "ttft", "tpot", "itl", "e2e":
			for k, v := range map[string]float64{"n": float64(d.Count), "p50": d.P50, "p90": d.P90, "p99": d.P99, "mean": d.Mean} {
				want["s-"+d.Metric+"-"+k] = v
			}
		}
	}
	if len(want) != 25 || sum.Requests < 40 {
		t.Fatalf("%d figures to compare, %d requests: the run is too small to judge", len(want), sum.Requests)
	}
	for id, v := range want {
		got, err := strconv.ParseFloat(b.Eval(t, fmt.Sprintf("document.getElementById(%q).dataset.v", id)), 64)
		if err != nil || got != v {
			t.Errorf("%s: the page shows %v (%v), the report %v", id, got, err, v)
		}
	}
	if slo := b.Eval(t, "document.querySelector('#lat tbody tr:first-child td:last-child').textContent"); slo != "p99 ≤ 250.0" {
		t.Errorf("TTFT's SLO cell reads %q, want p99 ≤ 250.0", slo)
	}
	if n := b.Eval(t, "String(document.querySelectorAll('#findings li').length)"); n == "0" {
		t.Error("the page lists no findings, not even 'none so far'")
	}
	for _, e := range b.Errs {
		t.Errorf("the page's console: %.300s", e)
	}
	shot := filepath.Join(t.ArtifactDir(), "live.png")
	n := b.Screenshot(t, shot, 20000)
	t.Logf("screenshot: %s (%d bytes)", shot, n)
}

func httpOK(url string) bool {
	resp, err := http.Get(url) //nolint:gosec // a loopback test server
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// waitFor polls ok until it holds, failing the test after a minute (a
// bound against a hang, not a timing assertion).
func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(time.Minute); !ok(); {
		if time.Now().After(end) {
			t.Fatal("waited a minute in vain")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
