package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// Arrivals yields the intended send instants of a run, as offsets from its
// start instant, in non-decreasing order. Offsets are absolute: a late
// sender never shifts the ones after it.
type Arrivals interface {
	// Next returns the next offset; ok is false when there are no more.
	Next() (at time.Duration, ok bool)
}

// Process names an arrival process.
type Process string

// The arrival processes.
const (
	Poisson  Process = "poisson"  // exponential gaps with mean 1/rate
	Gamma    Process = "gamma"    // gamma gaps, shape = burstiness, mean 1/rate
	Constant Process = "constant" // the i-th arrival at exactly i/rate
)

// ParseProcess reads an arrival process name.
func ParseProcess(s string) (Process, error) {
	switch p := Process(strings.ToLower(strings.TrimSpace(s))); p {
	case Poisson, Gamma, Constant:
		return p, nil
	}
	return "", fmt.Errorf("arrival process %q: want poisson, gamma or constant", s)
}

// NewArrivals returns an endless arrival schedule at rate requests per
// second. Burstiness is the gamma shape (1 is Poisson; below 1 is burstier,
// above 1 smoother); it is used by Gamma only. Offsets of random processes
// are the running sum of gaps drawn from a generator seeded with seed.
func NewArrivals(p Process, rate, burstiness float64, seed uint64) (Arrivals, error) {
	if !(rate > 0) || math.IsInf(rate, 0) {
		return nil, fmt.Errorf("rate %g: must be a positive number of requests per second", rate)
	}
	switch p {
	case Constant:
		return &constant{rate: rate}, nil
	case Poisson:
		return &random{rate: rate, r: rand.New(rand.NewPCG(seed, 0xA11))}, nil
	case Gamma:
		if !(burstiness > 0) || math.IsInf(burstiness, 0) {
			return nil, fmt.Errorf("burstiness %g: must be positive", burstiness)
		}
		return &random{rate: rate, shape: burstiness, r: rand.New(rand.NewPCG(seed, 0xA11))}, nil
	}
	return nil, fmt.Errorf("arrival process %q: want poisson, gamma or constant", p)
}

type constant struct {
	rate float64
	i    int64
}

func (c *constant) Next() (time.Duration, bool) {
	at := time.Duration(float64(c.i) * 1e9 / c.rate)
	c.i++
	return at, true
}

type random struct {
	rate  float64
	shape float64 // 0: exponential
	r     *rand.Rand
	t     float64 // seconds
	first bool
}

func (g *random) Next() (time.Duration, bool) {
	if !g.first { // the first arrival is at the start instant
		g.first = true
		return 0, true
	}
	if g.shape == 0 {
		g.t += g.r.ExpFloat64() / g.rate
	} else {
		g.t += gammaSample(g.r, g.shape) / (g.shape * g.rate)
	}
	return time.Duration(g.t * 1e9), true
}

// gammaSample draws from Gamma(shape, 1) (Marsaglia and Tsang, 2000).
func gammaSample(r *rand.Rand, shape float64) float64 {
	if shape < 1 {
		// Gamma(a) = Gamma(a+1) · U^(1/a).
		return gammaSample(r, shape+1) * math.Pow(r.Float64(), 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := r.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

// AtOffsets replays a fixed list of offsets.
type AtOffsets struct {
	At []time.Duration
	i  int
}

// Next returns the next listed offset.
func (a *AtOffsets) Next() (time.Duration, bool) {
	if a.i >= len(a.At) {
		return 0, false
	}
	a.i++
	return a.At[a.i-1], true
}
