package whatif

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/prediction"
)

func TestOptionsCheckNamesTheSetting(t *testing.T) {
	ok := Options{SpeculativeK: 4, SpeculativeAlpha: 0.7}
	for _, tt := range []struct {
		o    Options
		want string
	}{
		{ok, ""},
		{Options{Levers: []string{"all"}, SpeculativeK: 4, SpeculativeAlpha: 0.7}, ""},
		{Options{Levers: []string{"turbo"}, SpeculativeK: 4, SpeculativeAlpha: 0.7}, "what_if"},
		{Options{MaxTokensCap: -1, SpeculativeK: 4, SpeculativeAlpha: 0.7}, "max_tokens_cap"},
		{Options{SpeculativeK: 0, SpeculativeAlpha: 0.7}, "speculative_k"},
		{Options{SpeculativeK: 4, SpeculativeAlpha: 1}, "speculative_alpha"},
	} {
		err := tt.o.Check()
		got := ""
		if err != nil {
			got = err.Error()
		}
		if (tt.want == "") != (err == nil) || tt.want != "" && !strings.Contains(got, tt.want) {
			t.Errorf("%+v: %v, want an error naming %q", tt.o, err, tt.want)
		}
	}
}

// Remedies rank by their effect on the first objective, then goodput;
// one without a finite effect (a refused request's percentile) comes last,
// and one that extrapolates (outside the twin's envelope) is never ranked:
// after all the others, however good its effect.
func TestRank(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	rs := []prediction.Remedy{
		{Lever: "none", Effect: nil, After: prediction.WhatIfPoint{GoodputRPS: 99}},
		{Lever: "half", Effect: f(0.5), After: prediction.WhatIfPoint{GoodputRPS: 2}},
		{Lever: "half-more-goodput", Effect: f(0.5), After: prediction.WhatIfPoint{GoodputRPS: 3}},
		{Lever: "worse", Effect: f(1.2)},
		{Lever: "best", Effect: f(0.1)},
		{Lever: "outside-interval", Effect: f(0.02), Interval80: &prediction.Interval{TTFT: 5.5, Outside: true}},
		{Lever: "outside", Effect: f(0.01), Extrapolates: []string{"outside the twin's envelope: 12 KV-cache preemptions"}},
	}
	w := &prediction.Predictions{Remedies: rs}
	rank(w)
	var got []string
	for _, r := range w.Remedies {
		got = append(got, r.Lever)
	}
	if diff := cmp.Diff([]string{"best", "half-more-goodput", "half", "worse", "none", "outside-interval", "outside"}, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}

func TestEffectAndPercentile(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	if e := effect(prediction.WhatIfPoint{ValuesMS: []*float64{f(200)}}, prediction.WhatIfPoint{ValuesMS: []*float64{f(50)}}); e == nil || *e != 0.25 {
		t.Errorf("effect %v, want 0.25", e)
	}
	if e := effect(prediction.WhatIfPoint{ValuesMS: []*float64{f(200)}}, prediction.WhatIfPoint{ValuesMS: []*float64{nil}}); e != nil {
		t.Errorf("effect on a refused request's percentile %v, want none", *e)
	}
	// Nearest rank: the 90th percentile of 1..10 is 9.
	xs := []int{10, 1, 9, 2, 8, 3, 7, 4, 6, 5}
	if p := percentile(xs, 90); p != 9 {
		t.Errorf("P90 %d, want 9", p)
	}
	if s := span(xs); s != [2]int{1, 10} {
		t.Errorf("span %v", s)
	}

}

// The run: injected server stalls made E2E P99 1.74 s, the twin's
// baseline 1.08 s — 38 % off against its stated 10 %: the remedies are
// unreliable, and say why. A baseline within the stated error (or a
// profile's larger residual) is not.
func TestFidelityMarksATwinThatMissesTheRun(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	slos := []latency.SLO{{Metric: latency.E2E, Percentile: 99}, {Metric: latency.TTFT, Percentile: 50}}
	r := &runner{slos: slos}
	miss, stated, why := r.fidelity([]float64{1740, 100}, []*float64{f(1080), f(103)})
	if why == "" || !strings.Contains(why, "e2e P99 measured 1740 ms, twin 1080 ms (off by 38 %, its stated error 10 %)") || strings.Contains(why, "ttft") {
		t.Errorf("why = %q, want the E2E P99 miss named and TTFT P50 (3 %% off, within 5 %%) not", why)
	}
	if diff := cmp.Diff([]float64{0.10, 0.05}, stated); diff != "" {
		t.Errorf("stated errors (-want +got):\n%s", diff)
	}
	if miss[0] == nil || math.Abs(*miss[0]-660.0/1740) > 1e-12 {
		t.Errorf("miss %v, want 660/1740", miss[0])
	}
	if _, _, why := r.fidelity([]float64{1740, 100}, []*float64{f(1700), nil}); why != "" {
		t.Errorf("a baseline 2.3 %% off (and one unknown) is called unreliable: %q", why)
	}
	r.prof = &perfmodel.Profile{Residuals: map[string]perfmodel.Residual{"e2e": {P50: 0.1, P90: 0.2, P99: 0.45}}}
	if _, stated, why := r.fidelity([]float64{1740, 100}, []*float64{f(1080), f(103)}); why != "" || stated[0] != 0.45 {
		t.Errorf("a profile stating 45 %% at E2E P99: stated %v, why %q; want 0.45 and reliable", stated, why)
	}
}
