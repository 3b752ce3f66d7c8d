package report

import (
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/results"
)

// TestSeriesInBrowser renders the time-series section of a run whose
// second half is slower, with the server's gauges, in headless Chromium:
// its charts are there, the tail phase marked, and a screenshot of the
// section at 1280×800 is kept in the test's artifact folder.
func TestSeriesInBrowser(t *testing.T) {
	browser := findBrowser()
	if browser == "" {
		t.Skip("no Chromium installed (apt-get install chromium); skipping the browser test of the time series")
	}
	info := &results.RunInfo{Server: &results.ServerInfo{Series: []string{"running", "waiting", "kv_cache_usage"}}}
	for k := range 60 {
		wait := 0.0
		if k >= 30 {
			wait = float64(k-29) / 3
		}
		info.Samples = append(info.Samples, results.ServerSample{AtNS: int64(k) * 2e9, Running: 4, Waiting: wait,
			KVCacheUsage: 0.2 + float64(k)/120})
	}
	rep := collectRun(Options{SLOs: mustSLOs(t, "ttft:p99<=300ms")}, info, phaseRun(60, 1e9))
	if findingIndex(rep, RuleTailPhase) < 0 {
		t.Fatalf("no tail-phase finding: %+v", rep.Findings)
	}
	html := htmlOf(t, rep.WriteHTML)
	_, dom := openPage(t, browser, "report.html", html)
	at := strings.Index(dom, `id="time-series"`)
	if at < 0 {
		t.Fatalf("no time-series section:\n%.2000s", dom)
	}
	for _, id := range []string{"series-latency", "series-decode", "series-load", "series-queue", "series-kv"} {
		i := strings.Index(dom, `id="fig-`+id+`"`)
		if i < at || !strings.Contains(dom[i:min(len(dom), i+400)], "<svg") {
			t.Errorf("chart %s missing from the section, or without <svg>", id)
		}
	}
	if n := strings.Count(dom[at:], "tail phase (diagnosis)"); n < 4 {
		t.Errorf("the tail phase is marked on %d charts, want every one", n)
	}
	// The section alone, as a reader sees it on a laptop.
	s := string(html)
	head, _, _ := strings.Cut(s, "<body>")
	_, section, _ := strings.Cut(s, `<h2 id="time-series"`)
	section, _, _ = strings.Cut(`<h2 id="time-series"`+section, `<h2 id="latency"`)
	alone, _ := openPage(t, browser, "series.html", []byte(head+"<body>"+section+"</body></html>"))
	screenshot(t, browser, alone, "series.png", 1280, 800)
}
