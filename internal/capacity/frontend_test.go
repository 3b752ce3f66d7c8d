package capacity

import (
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/workload"
)

// A deployment adds its engine family's front end per request as simulate
// --engine does (vLLM 0.11's 37.6 ms), FrontEnd replaces it, and a
// disaggregated one adds none. By hand: arrivals 2 s apart never meet in
// the front end, so every request reaches the engine exactly 37.6 ms
// later and the whole run shifts by it — the P50 TTFT too.
func TestDeploymentFrontEnd(t *testing.T) {
	zero, five := time.Duration(0), 5*time.Millisecond
	d := h100()
	d.Engine.Engine = "vllm"
	for _, c := range []struct {
		name string
		set  *time.Duration
		pd   int
		want time.Duration
	}{
		{"the family's", nil, 0, 37600 * time.Microsecond},
		{"set", &five, 0, five},
		{"set to none", &zero, 0, 0},
		{"disaggregated", nil, 1, 0},
	} {
		dd := d
		dd.FrontEnd, dd.PrefillReplicas = c.set, c.pd
		if got, err := dd.frontEnd(); err != nil || got != c.want {
			t.Errorf("%s: front end %v (%v), want %v", c.name, got, err, c.want)
		}
	}
	src := &workload.Synthetic{Chat: true, Input: workload.Fixed(512), Output: workload.Fixed(16), Turns: 1, PrefixGroups: 1, Seed: 1}
	w, err := NewWorkload(src, workload.Load{Rate: 0.5, Arrival: workload.Constant, Requests: 10}, true, "test")
	if err != nil {
		t.Fatal(err)
	}
	p50 := func(d Deployment) time.Duration {
		pt, err := Evaluate(d, w, slos(t, "ttft:p50<=10s"), 0.5, Options{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		return pt.Values[0]
	}
	none := d
	none.FrontEnd = &zero
	if got, base := p50(d), p50(none); got-base != 37600*time.Microsecond {
		t.Errorf("P50 TTFT %v with the family's front end, %v without: the difference %v, want 37.6ms", got, base, got-base)
	}
}
