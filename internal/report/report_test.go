package report

import (
	"bytes"
	"github.com/tokentrace/tokentrace/internal/results"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSmokeText(t *testing.T) {
	rep := collect(Options{}, baseline(200, 10, 1))
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(b.String(), "\n") {
		if n := len([]rune(line)); n > 100 {
			t.Errorf("line %d has %d columns: %q", i+1, n, line)
		}
	}
	t.Log("\n" + b.String())
}

func TestSmokeHTML(t *testing.T) {
	rep := collect(Options{SLOs: mustSLOs(t, "ttft:p99<=1s,e2e:p99<=20s")}, overloadRun(300))
	var b bytes.Buffer
	if err := rep.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(t.TempDir(), "r.html"), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("REPORT_HTML_OUT") != "" {
		if err := os.WriteFile(os.Getenv("REPORT_HTML_OUT"), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// With the server's scraped samples in run.json, the in-flight chart shows
// them instead of the client's view.
func TestChartsUseServerSamples(t *testing.T) {
	c := NewCollector(Options{})
	for i, s := range baseline(100, 10, 1) {
		c.Add(s.record(i))
	}
	rep := c.Report()
	charts, err := rep.Charts()
	if err != nil {
		t.Fatal(err)
	}
	caption := func(charts []Chart) string {
		for _, ch := range charts {
			if ch.ID == "inflight-time" {
				return ch.Caption
			}
		}
		return ""
	}
	if !strings.Contains(caption(charts), "client view") {
		t.Errorf("without samples: %q", caption(charts))
	}
	c.SetRun(results.RunInfo{Samples: []results.ServerSample{{AtNS: 0, Running: 3, Waiting: 0}, {AtNS: 5e9, Running: 8, Waiting: 12}}})
	charts, err = c.Report().Charts()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(caption(charts), "scraped from the server") {
		t.Errorf("with samples: %q", caption(charts))
	}
}

// Big runs keep the table within 100 columns.
func TestTextWidthWithBigCounts(t *testing.T) {
	d := Dist{Metric: "client_queue", Count: 151451836, Mean: 12345.6, P50: 99999, P90: 123456, P95: 0.01,
		P99: 1, P999: 10, Max: 100000, P95CI: [2]float64{1, 2}, P99CI: [2]float64{12345.6, 99999}, Approx: true}
	rep := &Report{Summary: Summary{Requests: 1000000}, Metrics: []Dist{d, {Metric: "ttft", Count: 9999999}}}
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(b.String(), "\n") {
		if n := len([]rune(line)); n > 100 {
			t.Errorf("%d columns: %q", n, line)
		}
	}
	if !strings.Contains(b.String(), "151.5M") || !strings.Contains(b.String(), "9999999") {
		t.Errorf("counts:\n%s", b.String())
	}
}

// A chart that cannot be drawn (a point gonum/plot refuses) is a note on
// the page; the page and the other charts are still written.
func TestHTMLChartFailureIsANote(t *testing.T) {
	c := NewCollector(Options{})
	for i, s := range baseline(100, 10, 1) {
		c.Add(s.record(i))
	}
	rep := c.Report()
	rep.Figures.CDFs[0].Points[0].X = math.NaN()
	charts, err := rep.Charts()
	if err == nil || len(charts) == 0 {
		t.Fatalf("charts %d, err %v: want the others drawn and the failure returned", len(charts), err)
	}
	var b bytes.Buffer
	if err := rep.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "charts not drawn:") || !strings.Contains(b.String(), "<svg") {
		t.Errorf("the page lacks the note or the other charts")
	}
	if slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "charts not drawn") }) {
		t.Errorf("writing the page changed the report's notes: %v", rep.Notes)
	}
}
