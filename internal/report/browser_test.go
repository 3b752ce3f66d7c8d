package report

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/prediction"
	"github.com/tokentrace/tokentrace/internal/process"
)

// findBrowser returns a headless-capable Chromium, or "" when none is installed.
func findBrowser() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// consoleErrors picks the page's console messages and load failures out of
// Chromium's --enable-logging=stderr output.
func consoleErrors(logs string) []string {
	var out []string
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, ":CONSOLE") || strings.Contains(line, "Uncaught") ||
			strings.Contains(line, "Failed to load resource") || strings.Contains(line, "net::ERR_") {
			out = append(out, line)
		}
	}
	return out
}

// The scan catches what Chromium logs for a page with a console error and an
// exception (lines recorded from chromium 1xx headless), and ignores its own noise.
func TestConsoleErrorsScan(t *testing.T) {
	logs := `[8609:8609:1202/140619.368596:WARNING:ui/base/idle/idle_linux.cc:111] None of the known D-Bus ScreenSaver services could be used.
[8609:8609:1202/140619.636169:INFO:CONSOLE:1] "boom", source: file:///tmp/bad.html (1)
[8609:8609:1202/140619.636486:INFO:CONSOLE:1] "Uncaught ReferenceError: undefinedFn is not defined", source: file:///tmp/bad.html (1)
[29754:29809:1202/140117.651054:ERROR:dbus/bus.cc:405] Failed to connect to the bus: Could not parse server address`
	if got := consoleErrors(logs); len(got) != 2 {
		t.Errorf("found %d console lines, want 2: %q", len(got), got)
	}
}

// TestHTMLInBrowser opens the HTML report of a sweep in headless Chromium,
// checks that it renders without console errors, loads nothing from the
// network, puts the diagnosis before the charts and shows every chart, and
// saves a screenshot (go test -run Browser -artifacts -outputdir DIR keeps it).
func TestHTMLInBrowser(t *testing.T) {
	browser := findBrowser()
	if browser == "" {
		t.Skip("no Chromium installed (apt-get install chromium); skipping the browser test of the HTML report")
	}
	// The sweep, with the server's scraped samples: its KV cache and
	// preemptions get charts of their own on the latency chart's time axis.
	info := scraped(9, 0.97, 0, 0, serveConfig)
	for k := range info.Samples {
		info.Samples[k].AtNS = int64(k) * 80e9
	}
	rep := collectRun(Options{SLOs: mustSLOs(t, "ttft:p99<=500ms,tpot:p99<=50ms,e2e:p95<=3s")}, info, sweepReqs())
	rep.WhatIf = testWhatIf()
	html := htmlOf(t, rep.WriteHTML)

	// Self-contained: no fetched resource, no script.
	if m := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//|url\(\s*["']?https?:|<script|<link|@import`).Find(html); m != nil {
		t.Errorf("the page refers to an outside resource or script: %q", m)
	}

	page, dom := openPage(t, browser, "report.html", html)
	if !strings.Contains(dom, "<h1>tokentrace report") {
		t.Fatalf("the DOM does not hold the report:\n%.2000s", dom)
	}
	for _, id := range []string{"cdf-ttft", "cdf-tpot", "cdf-e2e", "latency-time", "throughput-time",
		"inflight-time", "kv-time", "preemptions-time", "ttft-input", "e2e-output", "stages-e2e", "stages-ttft",
		"sweep-latency", "sweep-goodput", "sweep-curve", "sweep-pareto"} {
		i := strings.Index(dom, `id="fig-`+id+`"`)
		if i < 0 {
			t.Errorf("chart %s missing from the rendered page", id)
			continue
		}
		if !strings.Contains(dom[i:min(len(dom), i+400)], "<svg") {
			t.Errorf("chart %s has no <svg> in the rendered page", id)
		}
	}
	// The what-if: one remedy each with its before/after chart, the
	// extrapolation marked, between the diagnosis and the charts.
	for i := range rep.WhatIf.Remedies {
		at := strings.Index(dom, fmt.Sprintf(`id="remedy-%d"`, i))
		end := strings.Index(dom[max(at, 0):], "</figure>")
		if at < 0 || end < 0 || !strings.Contains(dom[at:at+end], "<svg") || !strings.Contains(dom[at:at+end], "→") {
			t.Errorf("remedy %d is missing, or has no chart or before → after line", i)
		}
	}
	if !strings.Contains(dom, `class="extrapolates"`) {
		t.Error("the remedy that extrapolates does not say so")
	}
	if n := strings.Count(dom, `<svg class="chart"`); n < 16 {
		t.Errorf("%d charts rendered, want 14 and 2 remedies'", n)
	}
	d, wi, c := strings.Index(dom, `id="diagnosis"`), strings.Index(dom, `id="what-if"`), strings.Index(dom, `id="charts"`)
	if d < 0 || wi < d || c < wi {
		t.Errorf("the diagnosis (at %d) must come before the what-if (at %d), and that before the charts (at %d)", d, wi, c)
	}
	screenshot(t, browser, page, "report.png", 1366, 4200)
}

// chromium runs the headless browser with args, failing the test if it
// fails, and returns its stdout and stderr.
func chromium(t *testing.T, browser string, args ...string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-extensions", "--no-first-run", "--enable-logging=stderr", "--v=0",
		"--user-data-dir=" + filepath.Join(t.TempDir(), "profile")}
	cmd := process.CommandGroup(ctx, browser, append(base, args...)...) // its renderers and GPU process end with it
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := process.Run(cmd); err != nil {
		t.Fatalf("%s: %v\n%s", browser, err, errb.String())
	}
	return out.String(), errb.String()
}

// openPage writes page into the test's artifact folder (go test -artifacts
// -outputdir DIR keeps it) as name, opens it in Chromium, fails the test on
// a console error, and returns the file's path and the rendered DOM.
func openPage(t *testing.T, browser, name string, page []byte) (path, dom string) {
	t.Helper()
	path = filepath.Join(t.ArtifactDir(), name)
	if err := os.WriteFile(path, page, 0o644); err != nil {
		t.Fatal(err)
	}
	dom, logs := chromium(t, browser, "--dump-dom", "file://"+path)
	for _, line := range consoleErrors(logs) {
		t.Errorf("browser console: %s", line)
	}
	return path, dom
}

// screenshot saves the page at path, seen in a width×height window, as name
// in the test's artifact folder, failing the test if the image is missing or
// nearly empty.
func screenshot(t *testing.T, browser, path, name string, width, height int) {
	t.Helper()
	shot := filepath.Join(t.ArtifactDir(), name)
	chromium(t, browser, "--hide-scrollbars", fmt.Sprintf("--window-size=%d,%d", width, height), "--screenshot="+shot, "file://"+path)
	st, err := os.Stat(shot)
	if err != nil || st.Size() < 10000 {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, st.Size())
}

// htmlOf is what write writes.
func htmlOf(t *testing.T, write func(io.Writer) error) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := write(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestCompareSweepsInBrowser opens report --compare of two sweeps in
// headless Chromium: the throughput–latency curves and the Pareto fronts
// of both are overlaid, each knee ringed, and a screenshot is saved (go
// test -run Browser -artifacts -outputdir DIR keeps it).
func TestCompareSweepsInBrowser(t *testing.T) {
	browser := findBrowser()
	if browser == "" {
		t.Skip("no Chromium installed (apt-get install chromium); skipping the browser test of the comparison")
	}
	slos := Options{SLOs: mustSLOs(t, "tpot:p99<=15ms"), GPUs: 2}
	faster := paretoSweep()
	for i := range faster {
		faster[i].tpot *= 0.7
	}
	c := Compare(collectorOf(slos, paretoSweep()), collectorOf(slos, faster))
	if c.Sweeps == nil {
		t.Fatal("the comparison of two sweeps has no Sweeps")
	}
	if got := c.Sweeps.ParetoB.Knee; got != "p3" {
		t.Errorf("B's knee is %q, want p3 (its TPOT p99 at p3 is 14 ms)", got)
	}
	page, dom := openPage(t, browser, "compare.html", htmlOf(t, c.WriteHTML))
	for _, id := range []string{"sweep-curve", "sweep-pareto"} {
		i := strings.Index(dom, `id="fig-`+id+`"`)
		if i < 0 || !strings.Contains(dom[i:min(len(dom), i+400)], "<svg") {
			t.Errorf("chart %s missing or empty in the rendered page", id)
			continue
		}
		fig, _, _ := strings.Cut(dom[i:], "</figure>")
		for _, s := range []string{"A SLO knee (p2)", "B SLO knee (p3)"} {
			if !strings.Contains(fig, s) {
				t.Errorf("chart %s lacks the legend %q", id, s)
			}
		}
	}
	if !strings.Contains(dom, "A front") || !strings.Contains(dom, "B: SLO knee: p3") {
		t.Error("the page lacks B's front or its knee in words")
	}
	screenshot(t, browser, page, "compare.png", 1366, 2400)
}

// collectorOf is a collector fed the requests.
func collectorOf(opts Options, reqs []synthReq) *Collector {
	c := NewCollector(opts)
	for i, s := range reqs {
		c.Add(s.record(i))
	}
	return c
}

// testWhatIf is a what-if as internal/whatif makes one: two remedies, one
// of them outside a profile's fitted range.
func testWhatIf() *prediction.Predictions {
	f := func(v float64) *float64 { return &v }
	return &prediction.Predictions{Basis: "profile h100.yaml", Deployment: "1 × H100-SXM TP1 bf16, kv bf16", Workload: "the run's requests",
		Objectives: []string{"ttft:p99<=500ms"}, Judged: true, MeasuredMS: []float64{1840},
		Baseline: prediction.WhatIfPoint{ValuesMS: []*float64{f(1790)}, GoodputRPS: 7.2, KeepsUp: true},
		Remedies: []prediction.Remedy{
			{Lever: "prefix-caching", Title: "prefix caching on", Setting: "enable_prefix_caching: false → true", For: []string{RulePrefillBound},
				After: prediction.WhatIfPoint{ValuesMS: []*float64{f(410)}, GoodputRPS: 11.8, Meets: true, KeepsUp: true}, Effect: f(0.23)},
			{Lever: "replicas", Title: "one more replica", Setting: "replicas: 1 → 2", For: []string{RuleServerQueueing},
				After: prediction.WhatIfPoint{ValuesMS: []*float64{f(900)}, GoodputRPS: 14.1, KeepsUp: true}, Effect: f(0.5),
				Extrapolates: []string{"batch 40 is outside the fitted 1–27"}},
		},
		Assumptions: []string{"each prediction is one simulation of the run's own requests"}, Simulations: 40, ElapsedS: 1.2}
}
