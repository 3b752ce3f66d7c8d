package simulate

import "testing"

func TestQueueGrowing(t *testing.T) {
	ramp := func(f func(i int) int) []Sample {
		ss := make([]Sample, 40)
		for i := range ss {
			ss[i].Waiting = f(i)
		}
		return ss
	}
	for _, c := range []struct {
		name string
		ss   []Sample
		want bool
	}{
		{"growing", ramp(func(i int) int { return 5 * i }), true},
		{"steady", ramp(func(i int) int { return 30 + i%3 }), false},
		{"growing but small", ramp(func(i int) int { return i / 4 }), false},
		{"drains at the end", ramp(func(i int) int { return min(5*i, 5*(40-i)) }), false},
		{"too few samples", ramp(func(i int) int { return 5 * i })[:6], false},
	} {
		if got := queueGrowing(c.ss); got != c.want {
			t.Errorf("%s: queueGrowing = %v", c.name, got)
		}
	}
}
