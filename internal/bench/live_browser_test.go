package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/process"
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
	browser := findChromium()
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
	b := startBrowser(t, browser)
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
	b.call(t, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": false})
	b.call(t, "Page.navigate", map[string]any{"url": page})

	// It updates: the snapshot it shows moves on, through its events.
	waitFor(t, func() bool { return b.eval(t, "document.body.dataset.seq") != "" })
	seq0, _ := strconv.Atoi(b.eval(t, "document.body.dataset.seq"))
	waitFor(t, func() bool {
		seq, _ := strconv.Atoi(b.eval(t, "document.body.dataset.seq"))
		events, _ := strconv.Atoi(b.eval(t, "document.body.dataset.events"))
		return seq >= seq0+2 && events >= 2
	})
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	waitFor(t, func() bool { return b.eval(t, "document.body.dataset.final") == "true" })

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
		got, err := strconv.ParseFloat(b.eval(t, fmt.Sprintf("document.getElementById(%q).dataset.v", id)), 64)
		if err != nil || got != v {
			t.Errorf("%s: the page shows %v (%v), the report %v", id, got, err, v)
		}
	}
	if slo := b.eval(t, "document.querySelector('#lat tbody tr:first-child td:last-child').textContent"); slo != "p99 ≤ 250.0" {
		t.Errorf("TTFT's SLO cell reads %q, want p99 ≤ 250.0", slo)
	}
	if n := b.eval(t, "String(document.querySelectorAll('#findings li').length)"); n == "0" {
		t.Error("the page lists no findings, not even 'none so far'")
	}
	for _, e := range b.errs {
		t.Errorf("the page's console: %.300s", e)
	}
	shot := filepath.Join(t.ArtifactDir(), "live.png")
	var png struct {
		Data string `json:"data"`
	}
	if err := json.Unmarshal(b.call(t, "Page.captureScreenshot", map[string]any{"format": "png"}), &png); err != nil {
		t.Fatal(err)
	}
	img, err := base64.StdEncoding.DecodeString(png.Data)
	if err != nil || len(img) < 20000 {
		t.Fatalf("screenshot: %v (%d bytes)", err, len(img))
	}
	if err := os.WriteFile(shot, img, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(img))
}

// findChromium returns a headless-capable Chromium, or "" when none is
// installed.
func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
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

// devtools is headless Chromium driven over --remote-debugging-pipe: the
// DevTools protocol's JSON messages, each ended by a NUL byte, on the
// child's fd 3 (to it) and fd 4 (from it), attached to one page.
type devtools struct {
	w    io.Writer
	r    *bufio.Reader
	id   int
	sess string
	// errs are the page's uncaught exceptions and console errors seen so
	// far (Runtime.exceptionThrown, Runtime.consoleAPICalled "error").
	errs []string
}

func startBrowser(t *testing.T, browser string) *devtools {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	toR, toW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fromR, fromW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := process.CommandGroup(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-extensions", "--no-first-run", "--hide-scrollbars", "--remote-debugging-pipe",
		"--user-data-dir="+filepath.Join(t.TempDir(), "profile"), "about:blank")
	cmd.ExtraFiles = []*os.File{toR, fromW}
	if err := process.StartCmd(cmd); err != nil {
		cancel()
		t.Fatal(err)
	}
	toR.Close()
	fromW.Close()
	t.Cleanup(func() {
		toW.Close()
		cancel()
		_ = cmd.Wait()
		fromR.Close()
	})
	d := &devtools{w: toW, r: bufio.NewReader(fromR)}
	var target struct {
		TargetID string `json:"targetId"`
	}
	if err := json.Unmarshal(d.call(t, "Target.createTarget", map[string]any{"url": "about:blank"}), &target); err != nil {
		t.Fatal(err)
	}
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.Unmarshal(d.call(t, "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}), &attached); err != nil {
		t.Fatal(err)
	}
	d.sess = attached.SessionID
	d.call(t, "Runtime.enable", map[string]any{})
	return d
}

// call sends one command and returns its result, skipping events.
func (d *devtools) call(t *testing.T, method string, params any) json.RawMessage {
	t.Helper()
	d.id++
	msg := map[string]any{"id": d.id, "method": method, "params": params}
	if d.sess != "" {
		msg["sessionId"] = d.sess
	}
	b, _ := json.Marshal(msg)
	if _, err := d.w.Write(append(b, 0)); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	for {
		line, err := d.r.ReadBytes(0)
		if err != nil {
			t.Fatalf("%s: reading the browser: %v", method, err)
		}
		var r struct {
			ID     int             `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(bytes.TrimSuffix(line, []byte{0}), &r); err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		if r.Method == "Runtime.exceptionThrown" || r.Method == "Runtime.consoleAPICalled" && bytes.Contains(r.Params, []byte(`"type":"error"`)) {
			d.errs = append(d.errs, string(r.Params))
		}
		if r.ID != d.id {
			continue
		}
		if r.Error != nil {
			t.Fatalf("%s: %v", method, errors.New(r.Error.Message))
		}
		return r.Result
	}
}

// eval evaluates a JavaScript expression in the page, as a string ("" for
// undefined).
func (d *devtools) eval(t *testing.T, expr string) string {
	t.Helper()
	var r struct {
		Result struct {
			Value any `json:"value"`
		} `json:"result"`
	}
	if err := json.Unmarshal(d.call(t, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}), &r); err != nil {
		t.Fatal(err)
	}
	if r.Result.Value == nil {
		return ""
	}
	return fmt.Sprint(r.Result.Value)
}
