package capacity

import (
	"math"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/latency"
)

// Goodput is the highest arrival rate at which a deployment meets every
// SLO, as the search found it.
type Goodput struct {
	// Rate is the highest rate found meeting every SLO (requests per
	// second); 0 when none down to MinRate does.
	Rate float64
	// At is the simulation at Rate (nil when Rate is 0).
	At *Point
	// Above is the lowest rate found failing, whose point says which SLO
	// gave way (nil if none failed up to the search's ceiling).
	Above *Point
	// Simulations counts the simulations the search ran.
	Simulations int
}

// Search settings of the goodput search.
const (
	// DefaultTolerance: the search stops when the failing rate is within
	// 5 % of the meeting one (bench's capacity search stops there too).
	DefaultTolerance = 0.05
	// bracketFactor is the step of the bracketing phase.
	bracketFactor = 2.0
	// maxBracketSteps bounds the bracketing phase each way (2^12: from a
	// guess 4,096 times too high or too low).
	maxBracketSteps = 12
)

// hint is what a goodput search knows before it starts: a rate known to
// meet the SLOs (lo, with its point), one known to fail (hi), and where to
// start when it knows neither (guess).
type hint struct {
	lo, hi  float64
	loPoint *Point
	hiPoint *Point
	guess   float64
	tol     float64
	minRate float64
	// ceiling, when set, is tried first above lo: the roofline's rate
	// bound (with its margin), which the deployment should not reach.
	ceiling float64
}

// FindGoodput searches the highest rate at which the deployment meets
// every SLO: it brackets the rate from guess (requests per second; 0: the
// workload's own rate) by doubling or halving, then bisects until the
// failing rate is within tol (0: DefaultTolerance) of the meeting one.
func FindGoodput(d Deployment, w Workload, slos []latency.SLO, guess, tol float64, o Options) (Goodput, error) {
	r, err := d.resolve()
	if err != nil {
		return Goodput{}, err
	}
	if w.Closed {
		return Goodput{}, field.Errorf("concurrency", "a closed loop's arrivals follow its latencies: its goodput cannot be searched by rate")
	}
	if !(guess > 0) {
		guess = w.Rate
	}
	return r.goodput(w, slos, hint{guess: guess, tol: tol}, o)
}

// goodput runs the search; the simulations that only need a verdict stop
// as soon as it is known.
func (r *resolved) goodput(w Workload, slos []latency.SLO, h hint, o Options) (Goodput, error) {
	if h.tol <= 0 {
		h.tol = DefaultTolerance
	}
	if h.minRate <= 0 {
		h.minRate = 1e-4 * max(h.guess, h.lo, 1e-3)
	}
	var g Goodput
	try := func(rate float64) (bool, error) {
		p, err := r.evaluate(w, slos, rate, o)
		g.Simulations++
		if err != nil {
			return false, err
		}
		if p.Meets {
			h.lo, h.loPoint = rate, &p
		} else {
			h.hi, h.hiPoint = rate, &p
		}
		return p.Meets, nil
	}
	if h.lo == 0 && (h.hi == 0 || math.IsInf(h.hi, 1)) {
		if _, err := try(h.guess); err != nil {
			return g, err
		}
	}
	for step := 0; h.hi == 0 && step < maxBracketSteps; step++ {
		next := h.lo * bracketFactor
		if h.ceiling > h.lo*(1+h.tol) {
			next = min(next, h.ceiling) // the roofline's bound is likely to fail
		}
		h.ceiling = 0
		if _, err := try(next); err != nil {
			return g, err
		}
	}
	for step := 0; h.lo == 0 && step < maxBracketSteps; step++ {
		next := h.hi / bracketFactor
		if next < h.minRate {
			break
		}
		if _, err := try(next); err != nil {
			return g, err
		}
	}
	for h.lo > 0 && h.hi > 0 && h.hi/h.lo > 1+h.tol {
		if _, err := try(math.Sqrt(h.lo * h.hi)); err != nil {
			return g, err
		}
	}
	g.Rate, g.At, g.Above = h.lo, h.loPoint, h.hiPoint
	return g, nil
}
