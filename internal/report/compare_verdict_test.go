package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/results"
)

// A comparison opens with the settings that differ and a one-line
// verdict; gains are marked better and losses worse, not alike.
func TestCompareVerdictAndSettings(t *testing.T) {
	slow := baseline(400, 10, 1)
	fast := baseline(400, 10, 2)
	for i := range fast {
		fast[i].prefill /= 4 // TTFT down by ~ 20 ms of ~ 30 ms
		fast[i].tpot *= 1.5  // TPOT up by half
	}
	a := NewCollector(Options{})
	a.SetRun(results.RunInfo{Target: "http://h:8000", Model: "m", Mode: "open", OfferedRate: 10})
	b := NewCollector(Options{})
	b.SetRun(results.RunInfo{Target: "http://h:8000", Model: "m", Mode: "closed", Concurrency: 4,
		Server: &results.ServerInfo{Engine: "vllm", Config: map[string]string{"enable_prefix_caching": "true"}}})
	for i := range slow {
		a.Add(slow[i].record(i))
		b.Add(fast[i].record(i))
	}
	c := Compare(a, b)
	checkComparePage(t, c)
	if !strings.HasPrefix(c.Verdict, "B is better in ttft p99 ") || !strings.Contains(c.Verdict, "; worse in tpot p99 +") {
		t.Errorf("verdict %q, want TTFT better and TPOT worse", c.Verdict)
	}
	want := map[string][2]string{"load": {"open 10 req/s", "closed 4 concurrent"}, "engine": {"—", "vllm"},
		"server enable_prefix_caching": {"—", "true"}}
	for _, d := range c.Differs {
		if w, ok := want[d.Setting]; !ok || w != [2]string{d.A, d.B} {
			t.Errorf("differs %+v, want %v", d, w)
		}
		delete(want, d.Setting)
	}
	if len(want) > 0 {
		t.Errorf("settings missing from the differences: %v", want)
	}
	var text, html bytes.Buffer
	if err := c.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(text.String(), "\n")
	if !strings.HasPrefix(lines[3], "verdict: B is better") || !strings.Contains(text.String(), "settings that differ") {
		t.Errorf("the text does not open with the verdict and the settings:\n%s", text.String())
	}
	if err := c.WriteHTML(&html); err != nil {
		t.Fatal(err)
	}
	h := html.String()
	if v, d := strings.Index(h, `id="verdict"`), strings.Index(h, `id="differs"`); v < 0 || d < v || d > strings.Index(h, "<h2>Differences") {
		t.Error("the page does not open with the verdict, then the settings that differ")
	}
	if !strings.Contains(h, `class="better"`) || !strings.Contains(h, `class="worse"`) {
		t.Error("the page does not mark gains and losses apart")
	}
}

// checkComparePage opens the comparison in headless Chromium (when one is
// installed): the verdict and the settings are in the first screen, and a
// 1280×800 screenshot is saved (go test -run CompareVerdict -artifacts
// -outputdir DIR keeps it).
func checkComparePage(t *testing.T, c *Comparison) {
	t.Helper()
	browser := findBrowser()
	if browser == "" {
		t.Log("no Chromium installed: the comparison page is not opened in a browser")
		return
	}
	page, dom := openPage(t, browser, "compare.html", htmlOf(t, c.WriteHTML))
	if !strings.Contains(dom, "Verdict:</b> B is better") || !strings.Contains(dom, `<td>closed 4 concurrent</td>`) {
		t.Errorf("the rendered page lacks the verdict or the settings:\n%.3000s", dom)
	}
	screenshot(t, browser, page, "compare-1280.png", 1280, 800)
}
