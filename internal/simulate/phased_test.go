package simulate_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/workload"
)

// TestPhasedArrivalsMovesOnlyTheFirst checks the open-loop draws' phase:
// the first arrival moves later by d, never past the second, and the
// others keep their instants.
func TestPhasedArrivalsMovesOnlyTheFirst(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		d    time.Duration
		want []time.Duration
	}{
		{"none", 0, []time.Duration{0, 100 * ms, 200 * ms, 300 * ms}},
		{"within a gap", 30 * ms, []time.Duration{30 * ms, 100 * ms, 200 * ms, 300 * ms}},
		{"past the second", 150 * ms, []time.Duration{100 * ms, 100 * ms, 200 * ms, 300 * ms}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := phasedArrivals(workload.Load{Arrival: workload.Constant, Rate: 10}, tc.d)()
			var got []time.Duration
			for range tc.want {
				at, ok := a.Next()
				if !ok {
					t.Fatal("the schedule ended")
				}
				got = append(got, at)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("arrivals (-want +got):\n%s", d)
			}
		})
	}
}
