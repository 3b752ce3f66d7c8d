package report

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
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
	dir := t.ArtifactDir()
	page := filepath.Join(dir, "report.html")
	f, err := os.Create(page)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteHTML(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	html, _ := os.ReadFile(page)

	// Self-contained: no fetched resource, no script.
	if m := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//|url\(\s*["']?https?:|<script|<link|@import`).Find(html); m != nil {
		t.Errorf("the page refers to an outside resource or script: %q", m)
	}

	run := func(args ...string) (stdout, stderr string) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
			"--disable-extensions", "--no-first-run", "--enable-logging=stderr", "--v=0",
			"--user-data-dir=" + filepath.Join(t.TempDir(), "profile")}
		cmd := exec.CommandContext(ctx, browser, append(base, args...)...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %v\n%s", browser, err, errb.String())
		}
		return out.String(), errb.String()
	}
	dom, logs := run("--dump-dom", "file://"+page)
	for _, line := range consoleErrors(logs) {
		t.Errorf("browser console: %s", line)
	}
	if !strings.Contains(dom, "<h1>tokentrace report") {
		t.Fatalf("the DOM does not hold the report:\n%.2000s", dom)
	}
	for _, id := range []string{"cdf-ttft", "cdf-tpot", "cdf-e2e", "latency-time", "throughput-time",
		"inflight-time", "kv-time", "preemptions-time", "ttft-input", "e2e-output", "stages-e2e", "stages-ttft",
		"sweep-latency", "sweep-goodput"} {
		i := strings.Index(dom, `id="fig-`+id+`"`)
		if i < 0 {
			t.Errorf("chart %s missing from the rendered page", id)
			continue
		}
		if !strings.Contains(dom[i:min(len(dom), i+400)], "<svg") {
			t.Errorf("chart %s has no <svg> in the rendered page", id)
		}
	}
	if n := strings.Count(dom, `<svg class="chart"`); n < 14 {
		t.Errorf("%d charts rendered, want 14", n)
	}
	if d, c := strings.Index(dom, `id="diagnosis"`), strings.Index(dom, `id="charts"`); d < 0 || c < d {
		t.Errorf("the diagnosis (at %d) must come before the charts (at %d)", d, c)
	}
	shot := filepath.Join(dir, "report.png")
	run("--hide-scrollbars", "--window-size=1366,4200", "--screenshot="+shot, "file://"+page)
	st, err := os.Stat(shot)
	if err != nil || st.Size() < 10000 {
		t.Fatalf("screenshot %s: %v (size %v)", shot, err, st)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, st.Size())
}
