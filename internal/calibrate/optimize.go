package calibrate

import (
	"context"
	"fmt"
	"math"

	"gonum.org/v1/gonum/optimize"
)

// search is a Nelder–Mead run over constants in log space relative to
// their start: loss(x) prices a point; maxEvals bounds the evaluations and
// iters the iterations without improvement.
type search struct {
	simplex float64
	iters   int
	tol     float64 // relative convergence of the loss
}

// minimize runs the search from x0. A point more than e⁵ from the start in
// any constant is outside every plausible value and costs +Inf; so does a
// point loss cannot price (its error is returned if nothing better was
// found).
func (s search) minimize(ctx context.Context, loss func(x []float64) (float64, error), x0 []float64, maxEvals int) ([]float64, int, error) {
	var lossErr error
	f := func(x []float64) float64 {
		if ctx.Err() != nil {
			return math.Inf(1)
		}
		for _, v := range x {
			if math.Abs(v) > 5 {
				return math.Inf(1)
			}
		}
		l, err := loss(x)
		if err != nil {
			lossErr = err
			return math.Inf(1)
		}
		return l
	}
	settings := &optimize.Settings{FuncEvaluations: maxEvals,
		Converger: &optimize.FunctionConverge{Absolute: s.tol * 1e-2, Relative: s.tol, Iterations: s.iters}}
	res, err := optimize.Minimize(optimize.Problem{Func: f}, x0, settings, &optimize.NelderMead{SimplexSize: s.simplex})
	if ctx.Err() != nil {
		return nil, 0, ctx.Err()
	}
	if res == nil || math.IsInf(res.F, 1) {
		n := 0
		if res != nil {
			n = res.FuncEvaluations
		}
		if lossErr != nil {
			return nil, n, lossErr
		}
		return nil, n, fmt.Errorf("calibrate: the optimiser found no point the engine can run: %v", err)
	}
	return res.X, res.FuncEvaluations, nil
}

// huber is the Huber loss of r with threshold d: quadratic for |r| ≤ d,
// linear beyond, so a few requests (or rows) the model cannot follow pull
// the fit linearly, not quadratically.
func huber(r, d float64) float64 {
	a := math.Abs(r)
	if a <= d {
		return r * r / 2
	}
	return d * (a - d/2)
}

// requestHuber is the per-request loss's threshold: 5 % in log ratio.
const requestHuber = 0.05
