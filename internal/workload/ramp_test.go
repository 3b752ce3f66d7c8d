package workload

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/field"
)

func TestRampUpOption(t *testing.T) {
	given := func(f string) bool { return f == "concurrency" }
	for _, tc := range []struct {
		in    string
		span  time.Duration
		first bool
	}{
		{"", 0, false},
		{"0", 0, false},
		{"2s", 2 * time.Second, false},
		{"first-token", 0, true},
		{" First-Token ", 0, true},
	} {
		o := DefaultOptions()
		o.Concurrency, o.RampUp = 8, tc.in
		_, l, err := o.Build(true, given)
		if err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		if l.RampUp != tc.span || l.RampFirstToken != tc.first {
			t.Errorf("%q: ramp-up %v, first token %t; want %v, %t", tc.in, l.RampUp, l.RampFirstToken, tc.span, tc.first)
		}
	}
	for _, tc := range []struct {
		name  string
		set   func(*Options)
		given string
	}{
		{"not a duration", func(o *Options) { o.Concurrency, o.RampUp = 4, "soon" }, "concurrency"},
		{"negative", func(o *Options) { o.Concurrency, o.RampUp = 4, "-1s" }, "concurrency"},
		{"open loop", func(o *Options) { o.Rate, o.RampUp = 5, "1s" }, "rate"},
		{"open loop by first token", func(o *Options) { o.Rate, o.RampUp = 5, RampFirstToken }, "rate"},
	} {
		o := DefaultOptions()
		tc.set(&o)
		_, _, err := o.Build(true, func(f string) bool { return f == tc.given })
		var fe *field.Error
		if !errors.As(err, &fe) || fe.Field != "ramp_up" {
			t.Errorf("%s: error %v, want one on ramp_up", tc.name, err)
		}
	}
	if err := (Load{Rate: 2, Requests: 1, RampFirstToken: true}).Validate(); err == nil {
		t.Error("Validate accepts a first-token ramp-up on an open loop")
	}
	l := Load{Concurrency: 4, RampUp: 100 * time.Millisecond}
	var starts []time.Duration
	for w := range 4 {
		starts = append(starts, l.Start(w))
	}
	if diff := cmp.Diff([]time.Duration{0, 25 * time.Millisecond, 50 * time.Millisecond, 75 * time.Millisecond}, starts); diff != "" {
		t.Errorf("starts (-want +got):\n%s", diff)
	}
}
