//go:build unix

package process

import "testing"

// TestSelfCPU: a running test process has spent CPU time, and the figure
// never goes back.
func TestSelfCPU(t *testing.T) {
	a := SelfCPU()
	sum := 0
	for i := range 1_000_000 {
		sum += i % 7
	}
	b := SelfCPU()
	if a <= 0 || b < a {
		t.Errorf("SelfCPU %v, then %v (after summing to %d): want > 0 and not less", a, b, sum)
	}
}
