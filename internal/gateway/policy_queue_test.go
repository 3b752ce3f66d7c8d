package gateway

import (
	"testing"
	"time"
)

func TestQueuePriority(t *testing.T) {
	for _, c := range []struct {
		name   string
		keyPri *int
		header string
		want   int
		code   string
	}{
		{"none", nil, "", 0, ""},
		{"header, no keys", nil, "7", 7, ""},
		{"key's", ptr(3), "", 3, ""},
		{"header lowers the key's", ptr(3), "1", 1, ""},
		{"header cannot raise the key's", ptr(3), "9", 3, ""},
		{"not an integer", nil, "high", 0, "invalid_priority"},
	} {
		x := policyExchange(t, onePool, "{}", map[string]string{headerPriority: c.header})
		if c.keyPri != nil {
			x.key = &keyState{cfg: KeyConfig{Priority: *c.keyPri}}
		}
		r := queuePriority{}.apply(x)
		if c.code != "" {
			if r == nil || r.code != c.code || r.status != 400 {
				t.Errorf("%s: %+v, want 400 %s", c.name, r, c.code)
			}
			continue
		}
		if r != nil || x.prio != c.want {
			t.Errorf("%s: %+v, priority %d, want %d", c.name, r, x.prio, c.want)
		}
	}
}

func TestTTFTDeadline(t *testing.T) {
	for _, c := range []struct {
		name, route, header string
		want                time.Duration // after arrival; 0: none
		code                string
	}{
		{"none", "{}", "", 0, ""},
		{"route's", "{deadline_ttft: 2s}", "", 2 * time.Second, ""},
		{"header wins", "{deadline_ttft: 2s}", "250.5", 250500 * time.Microsecond, ""},
		{"zero", "{}", "0", 0, "invalid_deadline"},
		{"negative", "{}", "-5", 0, "invalid_deadline"},
		{"not a number", "{}", "soon", 0, "invalid_deadline"},
		{"infinite", "{}", "+Inf", 0, "invalid_deadline"},
		{"NaN", "{}", "NaN", 0, "invalid_deadline"},
		{"over an hour", "{}", "3600001", 0, "invalid_deadline"},
		{"would overflow", "{}", "1e13", 0, "invalid_deadline"},
		{"an hour", "{}", "3600000", time.Hour, ""},
	} {
		x := policyExchange(t, onePool, "{}", map[string]string{headerDeadline: c.header})
		x.route = &RouteConfig{}
		if c.route != "{}" {
			x.route.DeadlineTTFT = Duration(2 * time.Second)
		}
		r := ttftDeadline{}.apply(x)
		if c.code != "" {
			if r == nil || r.code != c.code {
				t.Errorf("%s: %+v, want %s", c.name, r, c.code)
			}
			continue
		}
		got := time.Duration(0)
		if !x.deadline.IsZero() {
			got = x.deadline.Sub(x.tl.start)
		}
		if r != nil || got != c.want {
			t.Errorf("%s: %+v, deadline +%v, want +%v", c.name, r, got, c.want)
		}
	}
}

// TestTTFTDeadlineIsTheKeys: with keys, X-SLO-TTFT-Ms is the key's to
// claim, as X-Priority is: no tighter than its min_deadline_ttft, and
// ignored for a key without one (the route's deadline stands).
func TestTTFTDeadlineIsTheKeys(t *testing.T) {
	for _, c := range []struct {
		name   string
		min    time.Duration // the key's min_deadline_ttft
		header string
		want   time.Duration
	}{
		{"key without one: the route's", 0, "1", 2 * time.Second},
		{"raised to the key's", 500 * time.Millisecond, "1", 500 * time.Millisecond},
		{"looser than the key's", 500 * time.Millisecond, "900", 900 * time.Millisecond},
	} {
		x := policyExchange(t, onePool, "{}", map[string]string{headerDeadline: c.header})
		x.route = &RouteConfig{DeadlineTTFT: Duration(2 * time.Second)}
		x.key = &keyState{cfg: KeyConfig{MinDeadlineTTFT: Duration(c.min)}}
		if r := (ttftDeadline{}).apply(x); r != nil || x.deadline.Sub(x.tl.start) != c.want {
			t.Errorf("%s: %+v, deadline +%v, want +%v", c.name, r, x.deadline.Sub(x.tl.start), c.want)
		}
	}
}
