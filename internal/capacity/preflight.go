package capacity

import (
	"errors"
	"fmt"
	"math"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/simulate"
)

// MaxPlanRequests bounds the requests one plan simulates, all its
// simulations together: about 1,000 CPU-seconds at the 100,000 simulated
// requests per CPU-second the simulator runs (docs/performance.md).
// Options.Force (--force) lifts it, with simulate's bounds of each
// simulation.
const MaxPlanRequests = 100_000_000

// simulationsPer is about how many simulations one candidate's search
// runs: the check at the target rate, two steps bracketing its goodput,
// and the bisection down to the tolerance. Plan.Simulations counts what
// a search did run.
func simulationsPer(tol float64) int {
	if tol <= 0 {
		tol = DefaultTolerance
	}
	return 3 + int(math.Ceil(math.Log2(1/tol)))
}

// preflight estimates what the plan will simulate before anything runs:
// each candidate left after the bounds, at the first rate it is simulated
// at (the target; without one, half its roofline rate bound), checked with
// simulate.Preflight — the limits each simulation checks again when it
// runs — and all of them together (about simulationsPer runs each) against
// MaxPlanRequests. Over a bound it names the flag, the estimate and the
// bound; Force skips it. autoReplicas: the plan chose the replica counts
// (from the target rate), so a count over the bound is the rate's.
func (pl *Plan) preflight(w Workload, o SearchOptions, autoReplicas bool) error {
	if o.Force {
		return nil
	}
	obj := pl.Objective
	sims := simulationsPer(o.Tolerance)
	var total float64
	cs := pl.open("")
	for _, c := range cs {
		rate := obj.TargetRate
		if rate == 0 {
			rate = c.Bound.MaxRate / 2
		}
		if !(rate > 0) || math.IsInf(rate, 0) {
			continue
		}
		_, load := c.r.runLoad(w, obj.SLOs, rate, o.Options)
		if err := simulate.Preflight(c.r.Replicas+c.r.PrefillReplicas, load); err != nil {
			var fe *field.Error
			if errors.As(err, &fe) && fe.Field == "replicas" && autoReplicas {
				// Replicas the plan chose for the target rate (the roofline's
				// minimum): the rate is what to lower.
				return field.Invalid("rate", obj.TargetRate, "needs %d replicas of %s by the roofline, over the %d one simulation holds; lower it, or pass {force}",
					c.r.Replicas, c.GPU, simulate.MaxReplicas)
			}
			if errors.As(err, &fe) && fe.Field == "requests" && load.Requests > w.Load.Requests {
				// The requests were raised to span the least time at this rate.
				return field.Invalid("rate", rate, "makes %d requests per simulation (the rate × the least span a simulation runs, with its warm-up), over the %d one simulation holds; lower it, or pass {force}",
					load.Requests+load.WarmupRequests, simulate.MaxRequests)
			}
			return fmt.Errorf("candidate #%d (%s): %w", c.ID, c.Name, err)
		}
		if n, ok := load.Expected(); ok {
			total += float64(sims) * n
		}
	}
	if total <= MaxPlanRequests {
		return nil
	}
	at := "vary"
	if obj.TargetRate > 0 {
		at = "rate"
	}
	return field.Errorf(at, "the plan would simulate about %.3g requests (%d candidates × about %d simulations each), over the %d one plan runs (about %d CPU-seconds); narrow {vary}, lower {rate} or the workload's requests, or pass {force}",
		total, len(cs), sims, MaxPlanRequests, MaxPlanRequests/100_000)
}
