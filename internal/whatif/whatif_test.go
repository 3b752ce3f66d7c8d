package whatif

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/report"
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
// one without a finite effect (a refused request's percentile) comes last.
func TestRank(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	rs := []report.Remedy{
		{Lever: "none", Effect: nil, After: report.WhatIfPoint{GoodputRPS: 99}},
		{Lever: "half", Effect: f(0.5), After: report.WhatIfPoint{GoodputRPS: 2}},
		{Lever: "half-more-goodput", Effect: f(0.5), After: report.WhatIfPoint{GoodputRPS: 3}},
		{Lever: "worse", Effect: f(1.2)},
		{Lever: "best", Effect: f(0.1)},
	}
	rank(rs)
	var got []string
	for _, r := range rs {
		got = append(got, r.Lever)
	}
	if diff := cmp.Diff([]string{"best", "half-more-goodput", "half", "worse", "none"}, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}

func TestEffectAndPercentile(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	if e := effect(report.WhatIfPoint{ValuesMS: []*float64{f(200)}}, report.WhatIfPoint{ValuesMS: []*float64{f(50)}}); e == nil || *e != 0.25 {
		t.Errorf("effect %v, want 0.25", e)
	}
	if e := effect(report.WhatIfPoint{ValuesMS: []*float64{f(200)}}, report.WhatIfPoint{ValuesMS: []*float64{nil}}); e != nil {
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
