package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/prediction"
	"github.com/tokentrace/tokentrace/internal/results"
)

// The report leads with what was tested and the verdict; the load
// generator's doubt about a 5 ms tick is said once, in the diagnosis, not
// as a banner above it.
func TestReportLeadsWithTestedAndVerdict(t *testing.T) {
	tick := "bench could not keep time from 0.650 s to 0.667 s of the run: its 5ms ticker woke 6.5 ms late"
	info := &results.RunInfo{Target: "http://10.0.0.7:8080", Model: "model-10x640.gguf", Mode: "open", OfferedRate: 2,
		Warnings: []string{tick}}
	rep := collectRun(Options{SLOs: mustSLOs(t, "ttft:p99<=10ms,tpot:p99<=1s")}, info, baseline(300, 2, 1))
	var text, html bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(text.String(), "\n")
	if lines[1] != "tested: http://10.0.0.7:8080 · model model-10x640.gguf · open 2 req/s" ||
		!strings.HasPrefix(lines[2], "verdict: TTFT P99 ") || !strings.Contains(lines[2], "SLOs FAIL (1 of 2): ttft:p99<=10ms") {
		t.Errorf("the text does not lead with what was tested and the verdict:\n%s", strings.Join(lines[:4], "\n"))
	}
	if n := strings.Count(text.String(), "5ms ticker"); n != 1 {
		t.Errorf("the ticker's doubt is said %d times in the text, want once", n)
	}
	if err := rep.WriteHTML(&html); err != nil {
		t.Fatal(err)
	}
	h := html.String()
	if !strings.Contains(h, "<title>tokentrace report: model-10x640.gguf at http://10.0.0.7:8080</title>") {
		t.Errorf("the page's title is not what was tested")
	}
	if hl, d := strings.Index(h, `<div class="headline failed" id="headline">`), strings.Index(h, `id="diagnosis"`); hl < 0 || hl > d ||
		!strings.Contains(h[hl:d], "SLOs FAIL") {
		t.Error("the page does not open with the verdict, marked failed, before the diagnosis")
	}
	if strings.Count(h, "5ms ticker") != 1 || strings.Contains(h, `<span class="sev">bench warning</span>`) {
		t.Error("the ticker's doubt is a banner or repeated on the page")
	}
	checkReportPage(t, h)
}

// checkReportPage opens the page in headless Chromium (when installed): the
// verdict renders, and a 1280×800 screenshot of its first screen is saved
// (go test -run LeadsWith -artifacts -outputdir DIR keeps it).
func checkReportPage(t *testing.T, page string) {
	t.Helper()
	browser := findBrowser()
	if browser == "" {
		t.Log("no Chromium installed: the page is not opened in a browser")
		return
	}
	path, dom := openPage(t, browser, "report.html", []byte(page))
	if !strings.Contains(dom, `<span class="muted">verdict</span> TTFT P99`) {
		t.Errorf("the rendered page lacks the verdict:\n%.2000s", dom)
	}
	screenshot(t, browser, path, "report-1280.png", 1280, 800)
}

// What-ifs that change nothing or make it worse are folded into one line,
// in the text and on the page.
func TestWhatIfNoGainFolded(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	w := testWhatIf()
	w.Remedies = append(w.Remedies,
		prediction.Remedy{Lever: "max-num-seqs", Title: "more sequences per step", Setting: "max_num_seqs: 256 → 512",
			After: prediction.WhatIfPoint{ValuesMS: []*float64{f(1785)}, GoodputRPS: 7.2, KeepsUp: true}, Effect: f(0.997)},
		prediction.Remedy{Lever: "chunked-prefill", Title: "chunked prefill off", Setting: "enable_chunked_prefill: true → false",
			After: prediction.WhatIfPoint{ValuesMS: []*float64{f(2400)}, GoodputRPS: 6.1, KeepsUp: true}, Effect: f(1.34)})
	rep := collectRun(Options{SLOs: mustSLOs(t, "ttft:p99<=500ms")}, nil, baseline(200, 10, 1))
	rep.WhatIf = w
	var text, html bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	want := "no gain (within 2%) or worse: more sequences per step (max_num_seqs: 256 → 512), chunked prefill off"
	if !strings.Contains(strings.Join(strings.Fields(text.String()), " "), want) || strings.Contains(text.String(), "3. ") {
		t.Errorf("the text does not fold the two remedies without gain into one line:\n%s", text.String())
	}
	if err := rep.WriteHTML(&html); err != nil {
		t.Fatal(err)
	}
	if h := html.String(); strings.Count(h, `class="finding remedy`) != 2 || !strings.Contains(h, `id="what-if-no-gain"`) {
		t.Errorf("the page shows %d remedy cards, want 2 and the folded line", strings.Count(h, `class="finding remedy`))
	}
}

// Two findings with one remedy say it once; the second points to the first.
func TestMergeRemedies(t *testing.T) {
	fs := []Finding{
		{Title: "Decode is slow", Remedies: []string{"run llama-server with more threads (-t)", "fewer slots (-np)"}},
		{Title: "Prefill is slow", Remedies: []string{"run llama-server with more threads (-t)"}},
		{Title: "Other", Remedies: []string{"something else"}},
	}
	mergeRemedies(fs)
	if got := fs[1].Remedies; len(got) != 1 || got[0] != `as for "Decode is slow" above` {
		t.Errorf("second finding's remedies %q", got)
	}
	if len(fs[0].Remedies) != 2 || len(fs[2].Remedies) != 1 {
		t.Errorf("findings without a repeated remedy changed: %+v", fs)
	}
}
