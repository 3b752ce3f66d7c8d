package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"gonum.org/v1/gonum/stat/distuv"
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
		r := rand.New(rand.NewPCG(seed, 0xA11))
		return &random{gap: func() float64 { return r.ExpFloat64() / rate }}, nil
	case Gamma:
		if !(burstiness > 0) || math.IsInf(burstiness, 0) {
			return nil, fmt.Errorf("burstiness %g: must be positive", burstiness)
		}
		// Shape k and rate k·rate: the mean gap is 1/rate, the coefficient
		// of variation 1/√k.
		g := distuv.Gamma{Alpha: burstiness, Beta: burstiness * rate, Src: rand.NewPCG(seed, 0xA11)}
		return &random{gap: g.Rand}, nil
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
	gap   func() float64 // seconds to the next arrival
	t     float64        // seconds
	first bool
}

func (g *random) Next() (time.Duration, bool) {
	if !g.first { // the first arrival is at the start instant
		g.first = true
		return 0, true
	}
	g.t += g.gap()
	return time.Duration(g.t * 1e9), true
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
