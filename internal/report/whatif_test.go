package report

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/prediction"
)

// outsideWhatIf is a what-if whose baseline lies inside the twin's
// envelope, with one remedy inside it and two outside (one adding an
// envelope flag, one whose interval alone is outside) that predict more
// gain than the one inside, in the order internal/whatif ranks them.
func outsideWhatIf() *prediction.Predictions {
	f := func(v float64) *float64 { return &v }
	in := &prediction.Interval{TTFT: 0.08, TPOT: 0.05, E2E: 0.06, From: "the profile's fit residuals (P90)"}
	out := &prediction.Interval{TTFT: 5.494, TPOT: 0.152, E2E: 0.156, From: "outside the envelope: P80 of |error| across sources", Outside: true}
	w := testWhatIf()
	w.Interval80 = in
	w.Remedies = []prediction.Remedy{
		{Lever: "replicas", Title: "one more replica", Setting: "replicas: 1 → 2", Interval80: in,
			After: prediction.WhatIfPoint{ValuesMS: []*float64{f(900)}, GoodputRPS: 14.1, KeepsUp: true}, Effect: f(0.5)},
		{Lever: "max-num-seqs", Title: "more sequences per step", Setting: "max_num_seqs: 256 → 512", Interval80: out,
			Extrapolates: []string{"outside the twin's envelope: 12 KV-cache preemptions: recomputation past the cache's capacity is modelled, not fitted"},
			After:        prediction.WhatIfPoint{ValuesMS: []*float64{f(90)}, GoodputRPS: 30, KeepsUp: true}, Effect: f(0.05)},
		{Lever: "weights", Title: "fp8 weights", Setting: "weights: bf16 → fp8", Interval80: out,
			After: prediction.WhatIfPoint{ValuesMS: []*float64{f(120)}, GoodputRPS: 25, KeepsUp: true}, Effect: f(0.07)},
	}
	return w
}

// TestOutsideRemedyNeverRanked: a remedy outside the twin's envelope is
// shown with its interval and mark in every output, and never ranked —
// no number in the text or the Markdown table, no rank on the page, never
// the best; the JSON carries its interval's outside_envelope and its
// extrapolation. The baseline's interval is in every output.
func TestOutsideRemedyNeverRanked(t *testing.T) {
	rep := collectRun(Options{SLOs: mustSLOs(t, "ttft:p99<=500ms")}, nil, baseline(200, 10, 1))
	rep.WhatIf = outsideWhatIf()
	if best, ok := rep.WhatIf.Best(); !ok || best.Lever != "replicas" {
		t.Errorf("best remedy %q (%v), want replicas: the only one inside the envelope", best.Lever, ok)
	}
	for _, tc := range []struct {
		name  string
		write func(io.Writer) error
		want  []string
		not   []string
	}{
		{"text", rep.WriteText,
			[]string{"1. one more replica:", "not ranked: more sequences per step:", "not ranked: fp8 weights:",
				"interval 80 %: TTFT ±8%, TPOT ±5%, E2E ±6%", "interval 80 %: TTFT ±549%"},
			[]string{"2. ", "3. "}},
		{"markdown", rep.WriteMarkdown,
			[]string{"| 1 | one more replica |", "| – | more sequences per step |", "| – | fp8 weights |",
				"Interval 80 %: TTFT ±8%", "interval 80 %: TTFT ±549%"},
			[]string{"| 2 |", "| 3 |"}},
		{"html", rep.WriteHTML,
			[]string{`data-rank="1"`, `<span class="sev">what-if #1 · replicas`, `<span class="sev">what-if · not ranked · max-num-seqs`,
				`<span class="sev">what-if · not ranked · weights`, `id="what-if-interval">Baseline's interval 80 %: TTFT ±8%`,
				`<p class="interval outside">interval 80 %: TTFT ±549%`, `<span class="mark">outside the twin's envelope</span>`},
			[]string{`data-rank="2"`, `data-rank="3"`, "what-if #2", "what-if #3"}},
	} {
		var b bytes.Buffer
		if err := tc.write(&b); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		s := b.String()
		if tc.name == "text" {
			s = strings.Join(strings.Fields(s), " ")
		}
		for _, w := range tc.want {
			if !strings.Contains(s, w) {
				t.Errorf("%s lacks %q", tc.name, w)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(s, w) {
				t.Errorf("%s ranks a remedy outside the envelope: %q", tc.name, w)
			}
		}
	}
	var b bytes.Buffer
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var got struct {
		WhatIf prediction.Predictions `json:"what_if"`
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	rs := got.WhatIf.Remedies
	if len(rs) != 3 || got.WhatIf.Interval80 == nil || got.WhatIf.Interval80.Outside ||
		rs[0].Interval80 == nil || rs[0].Interval80.Outside || !got.WhatIf.Ranked(rs[0]) {
		t.Fatalf("JSON: the baseline's and the inside remedy's intervals are lost or marked outside: %s", b.String())
	}
	for _, r := range rs[1:] {
		if r.Interval80 == nil || !r.Interval80.Outside || got.WhatIf.Ranked(r) {
			t.Errorf("JSON: %s is not marked outside the envelope, or is ranked", r.Lever)
		}
	}
}
