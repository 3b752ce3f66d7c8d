package calibrate

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// maxIntake bounds FitIntake's search: a front end slower than this per
// request is no front end but a stalled server.
const maxIntake = 500 * time.Millisecond

// intakeStep is FitIntake's resolution.
const intakeStep = 100 * time.Microsecond

// FitIntake is the server's front end per request (ClosedLoop.Intake) that
// best fits rows' mean TTFT, the rows timed with the constants effFor
// gives them: the smallest median |relative TTFT error| over the rows
// publishing TTFT. A row's predicted TTFT grows with the intake, so the
// median's optimum is an intake that makes some row exact: each row's is
// found by bisection in [0, maxIntake] (0 when the row is predicted slow
// without one) and the best of them returned, with its median |error|.
func FitIntake(rows []PublicRow, effFor func(PublicRow) (perfmodel.Efficiency, error)) (time.Duration, float64, error) {
	var fit []PublicRow
	for _, r := range rows {
		if r.TTFT > 0 {
			fit = append(fit, r)
		}
	}
	if len(fit) == 0 {
		return 0, 0, errors.New("fit intake: no row publishes TTFT")
	}
	effs := make([]perfmodel.Efficiency, len(fit))
	for i, r := range fit {
		eff, err := effFor(r)
		if err != nil {
			return 0, 0, fmt.Errorf("fit intake: %s: %w", r.ID, err)
		}
		effs[i] = eff
	}
	ttft := func(i int, intake time.Duration) (float64, error) {
		pr, err := predictWith(fit[i], effs[i], intake)
		if err != nil {
			return 0, fmt.Errorf("fit intake: %s: %w", fit[i].ID, err)
		}
		return pr.TTFT, nil
	}
	var candidates []time.Duration
	for i, r := range fit {
		x, err := exactIntake(func(d time.Duration) (float64, error) { return ttft(i, d) }, r.TTFT)
		if err != nil {
			return 0, 0, err
		}
		candidates = append(candidates, x)
	}
	slices.Sort(candidates)
	best, bestLoss := time.Duration(0), math.Inf(1)
	for _, c := range slices.Compact(candidates) {
		errs := make([]float64, len(fit))
		for i, r := range fit {
			p, err := ttft(i, c)
			if err != nil {
				return 0, 0, err
			}
			errs[i] = math.Abs(p-r.TTFT) / r.TTFT
		}
		if loss := median(errs); loss < bestLoss {
			best, bestLoss = c, loss
		}
	}
	return best, bestLoss, nil
}

// exactIntake is the intake, to intakeStep, at which ttft reaches the
// measured value: 0 when it is reached without one, maxIntake when not
// within it.
func exactIntake(ttft func(time.Duration) (float64, error), measured float64) (time.Duration, error) {
	lo, hi := time.Duration(0), maxIntake
	if p, err := ttft(lo); err != nil || p >= measured {
		return lo, err
	}
	if p, err := ttft(hi); err != nil || p <= measured {
		return hi, err
	}
	for hi-lo > intakeStep {
		mid := (lo + hi) / 2 / intakeStep * intakeStep
		if mid == lo {
			mid = lo + intakeStep
		}
		p, err := ttft(mid)
		if err != nil {
			return 0, err
		}
		if p < measured {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi, nil
}

// median is the middle of xs (the mean of the two middle values for an
// even count); xs is reordered.
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}
