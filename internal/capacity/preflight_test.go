package capacity

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// TestPlanPreflight: a plan over the bounds is refused before any
// simulation runs, naming the flag: a target rate whose replicas (chosen
// by the roofline) are over simulate.MaxReplicas; a replica count over it;
// a space whose simulations together are over MaxPlanRequests.
func TestPlanPreflight(t *testing.T) {
	w := synthetic(t, workload.Fixed(100), workload.Fixed(10), 0, 10, 100)
	s := slos(t, "ttft:p99<=1s")
	for _, c := range []struct {
		name  string
		space Space
		obj   Objective
		field string
		want  string
	}{
		{"auto replicas", Space{}, Objective{SLOs: s, TargetRate: 1e7}, "rate", "replicas of H100-SXM by the roofline, over the 4096"},
		{"given replicas", vary(t, "replicas=5000"), Objective{SLOs: s, TargetRate: 10}, "replicas", "over the 4096 replicas"},
		{"one simulation's requests", vary(t, "replicas=1000-1019"), Objective{SLOs: s, TargetRate: 150_000}, "rate", "requests per simulation (the rate × the least span a simulation runs, with its warm-up), over the 2000000 one simulation holds"},
		{"all together", vary(t, "replicas=1000-1019"), Objective{SLOs: s, TargetRate: 60_000}, "rate", "over the 100000000 one plan runs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pl, err := Search(context.Background(), h100(), c.space, w, c.obj, nil, testOptions)
			var fe *field.Error
			if !errors.As(err, &fe) || fe.Field != c.field || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one about %s containing %q", err, c.field, c.want)
			}
			if pl != nil {
				t.Errorf("a plan came back: %d simulations", pl.Simulations)
			}
		})
	}
}
