package calibrate

import (
	"context"
	"fmt"
	"math"

	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// Deployment names the rows of one deployment: one engine, model, GPU, TP
// and weight precision — the scope at which `tokentrace calibrate` fits a
// user's server, finer than FitGroup's engine, GPU and weight precision.
func Deployment(r PublicRow) string {
	return fmt.Sprintf("%s %s on %s, TP %d, %s", r.Engine, r.Model, r.GPU, r.TP, r.DType)
}

// DeploymentCandidates are the constant sets FitDeployment chooses among
// for a deployment at tp, fewest first: none (its group's fit stands);
// the per-deployment terms — compute, memory and step overhead, and at
// TP > 1 the all-reduce latency and ring step (at TP 1 no all-reduce
// runs, so they move nothing); and those with the sequence and context
// overheads as well.
func DeploymentCandidates(tp int) [][]string {
	core := []string{"compute", "memory", "step_overhead_us"}
	if tp > 1 {
		core = append(core, "all_reduce_latency_us", "ring_step_us")
	}
	all := append(append([]string(nil), core...), "seq_overhead_us", "context_overhead_ns")
	return [][]string{nil, core, all}
}

// DeploymentFit is a deployment's constants as FitDeployment chose and
// fitted them.
type DeploymentFit struct {
	Eff perfmodel.Efficiency
	// Fitted is the chosen candidate (nil: the start stands).
	Fitted []string
	// CVLoss is each candidate's PublicLoss on the sweeps it was not
	// fitted on, summed over the folds, in the candidates' order.
	CVLoss []float64
	// Evaluations counts the predictions of every row set run, the
	// cross-validation's included.
	Evaluations int
}

// FitDeployment fits one deployment's constants to its rows, from start
// (its group's fit), choosing how many to fit on the rows alone: each
// candidate set is scored by leave-one-sweep-out inside rows (fitted with
// cvEvals predictions on the other sweeps, priced by PublicLoss on the
// sweep left out; the empty set is start priced on every sweep), the
// candidate with the smallest summed loss wins (the earlier, smaller one
// on a tie), and it is fitted on every row with maxEvals predictions.
// With fewer than two sweeps nothing can be left out: start stands.
func FitDeployment(ctx context.Context, rows []PublicRow, start perfmodel.Efficiency, candidates [][]string, cvEvals, maxEvals int) (DeploymentFit, error) {
	var keys []string
	sweeps := map[string][]PublicRow{}
	for _, r := range rows {
		k := sweepKey(r)
		if _, ok := sweeps[k]; !ok {
			keys = append(keys, k)
		}
		sweeps[k] = append(sweeps[k], r)
	}
	out := DeploymentFit{Eff: start}
	if len(keys) < 2 || len(candidates) == 0 {
		return out, nil
	}
	best := -1
	for ci, names := range candidates {
		cv := 0.0
		for _, k := range keys {
			var train []PublicRow
			for _, r := range rows {
				if sweepKey(r) != k {
					train = append(train, r)
				}
			}
			eff, n, err := FitPublicConstants(ctx, train, start, names, cvEvals)
			if err != nil {
				return out, fmt.Errorf("leaving out %s: %w", k, err)
			}
			l, err := PublicLoss(sweeps[k], eff)
			if err != nil {
				return out, err
			}
			cv += l
			out.Evaluations += n + 1
		}
		out.CVLoss = append(out.CVLoss, cv)
		if best < 0 || cv < out.CVLoss[best] {
			best = ci
		}
	}
	if math.IsNaN(out.CVLoss[best]) {
		return out, fmt.Errorf("calibrate: no candidate priced")
	}
	out.Fitted = candidates[best]
	eff, n, err := FitPublicConstants(ctx, rows, start, out.Fitted, maxEvals)
	if err != nil {
		return out, err
	}
	out.Eff, out.Evaluations = eff, out.Evaluations+n
	return out, nil
}
