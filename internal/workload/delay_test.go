package workload

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestParseDelay(t *testing.T) {
	good := map[string]time.Duration{ // spec → mean
		"0": 0, "": 0, "20ms": 20 * time.Millisecond, "1.5s": 1500 * time.Millisecond,
		"uniform:10ms-30ms":              20 * time.Millisecond,
		"normal:mean=20ms,sd=5ms":        20 * time.Millisecond,
		"lognormal:mean=20ms,sigma=0.5":  20 * time.Millisecond,
		"exponential:mean=5ms":           5 * time.Millisecond,
		"Uniform: 1ms - 3ms":             2 * time.Millisecond,
		"lognormal:sigma=0.5,mean=200us": 200 * time.Microsecond,
	}
	for spec, mean := range good {
		d, err := ParseDelay(spec)
		if err != nil {
			t.Errorf("%q: %v", spec, err)
			continue
		}
		if d.Mean() != mean {
			t.Errorf("%q: mean %v, want %v", spec, d.Mean(), mean)
		}
	}
	for _, bad := range []string{"20", "uniform:10-30ms", "uniform:30ms", "normal:mean=20ms,sd=5", "lognormal:mean=20,sigma=0.5",
		"pareto:mean=1ms", "-5ms", "exponential:5ms", "trace:x.csv"} {
		if _, err := ParseDelay(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	// Draws are whole microseconds within the distribution's support.
	d, _ := ParseDelay("uniform:10ms-30ms")
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		x := d.Sample(r)
		if x < 10*time.Millisecond || x > 30*time.Millisecond || x%time.Microsecond != 0 {
			t.Fatalf("draw %v", x)
		}
	}
	if (DelayDist{}).Sample(r) != 0 {
		t.Error("the zero value draws a delay")
	}
}
