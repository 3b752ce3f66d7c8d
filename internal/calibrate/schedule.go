package calibrate

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// schedule is an anchored replay's steps, fixed: each step's batch, and
// for each request the steps of its prefill (first scheduled step to
// first token) and of its decode (after the first token to the last), as
// index ranges. With the schedule fixed, a request's simulated prefill and
// decode are sums of step times, smooth functions of the constants: the
// fit moves them without the jumps a replay has when a request lands in
// another step.
type schedule struct {
	batches []perfmodel.Batch
	// prefill[i] and decode[i] are request i's step index ranges [a, b).
	prefill, decode [][2]int
}

// batchRecorder is a StepTimer that keeps a copy of every batch it prices.
type batchRecorder struct {
	inner   engine.StepTimer
	batches []perfmodel.Batch
}

func (r *batchRecorder) StepTime(b *perfmodel.Batch) time.Duration {
	r.batches = append(r.batches, perfmodel.Batch{Seqs: slices.Clone(b.Seqs), DraftK: b.DraftK})
	return r.inner.StepTime(b)
}

// scheduleAt replays the requests anchored with eff and fixes the schedule
// the replay took.
func (p *problem) scheduleAt(eff perfmodel.Efficiency) (*schedule, error) {
	cfg, err := p.engine(eff)
	if err != nil {
		return nil, err
	}
	rec := &batchRecorder{inner: cfg.StepTimer}
	cfg.StepTimer = rec
	rp, err := replayAnchored(cfg, p.obs)
	if err != nil {
		return nil, err
	}
	if len(rec.batches) != len(rp.starts) {
		return nil, fmt.Errorf("calibrate: %d steps priced, %d run", len(rec.batches), len(rp.starts))
	}
	s := &schedule{batches: rec.batches, prefill: make([][2]int, len(p.obs)), decode: make([][2]int, len(p.obs))}
	at := func(t time.Time) int {
		i, _ := slices.BinarySearch(rp.starts, t.Sub(engine.SimEpoch))
		return i
	}
	for i, tl := range rp.timelines {
		s.prefill[i] = [2]int{at(tl.Scheduled), at(tl.FirstToken)}
		s.decode[i] = [2]int{at(tl.FirstToken), at(tl.Finished)}
	}
	return s, nil
}

// loss is the fit's loss on a fixed schedule with eff: per request, the
// Huber loss of the log ratio of simulated to measured prefill and TPOT,
// and a fifth of it for E2E (the measured queue standing for the
// simulated one), weighted.
func (p *problem) scheduleLoss(s *schedule, eff perfmodel.Efficiency, weights []float64, sums []time.Duration) (float64, error) {
	c := p.base
	c.Eff = eff
	est, err := perfmodel.New(c)
	if err != nil {
		return 0, err
	}
	sums[0] = 0
	for k := range s.batches {
		sums[k+1] = sums[k] + est.StepTime(&s.batches[k])
	}
	l := 0.0
	for i, o := range p.obs {
		if weights[i] == 0 {
			continue
		}
		pre := sums[s.prefill[i][1]] - sums[s.prefill[i][0]]
		dec := sums[s.decode[i][1]] - sums[s.decode[i][0]]
		r := huberReq(logRatio(pre, o.TTFT-o.Queue)) + 0.2*huberReq(logRatio(o.Queue+pre+dec, o.E2E))
		if mt, ok := o.TPOT(); ok {
			r += huberReq(logRatio(dec/time.Duration(o.Output-1), mt))
		}
		l += weights[i] * r
	}
	return l, nil
}

// minimizeOnSchedule runs Nelder–Mead from x0 on the fixed schedule s.
func (p *problem) minimizeOnSchedule(ctx context.Context, s *schedule, x0, weights []float64, maxEvals int) ([]float64, int, error) {
	sums := make([]time.Duration, len(s.batches)+1)
	return search{simplex: 0.2, iters: 200, tol: 1e-12}.minimize(ctx, func(x []float64) (float64, error) {
		return p.scheduleLoss(s, p.efficiency(x), weights, sums)
	}, x0, maxEvals)
}

// fitAnchored alternates between fixing the schedule an anchored replay
// takes with the current constants and fitting the constants on that
// schedule (moving half way towards the fit), until two rounds replay the
// same schedule (at the server's constants it is the server's own, a fixed
// point) or maxRounds pass. It returns the constants fitted on the last
// schedule, and that schedule.
func (p *problem) fitAnchored(ctx context.Context, x0, weights []float64, maxEvals int) ([]float64, *schedule, int, error) {
	const maxRounds = 40
	x, evals := slices.Clone(x0), 0
	var prev *schedule
	var fitted []float64
	for range maxRounds {
		s, err := p.scheduleAt(p.efficiency(x))
		if err != nil {
			return nil, nil, evals, err
		}
		nx := x
		for range 2 {
			y, n, err := p.minimizeOnSchedule(ctx, s, nx, weights, maxEvals)
			evals += n
			if err != nil {
				return nil, nil, evals, err
			}
			nx = y
		}
		if prev != nil && sameSchedule(prev, s) {
			return nx, s, evals, nil
		}
		// Half a step towards the fit: a full step can jump to another
		// self-consistent schedule, one the server never ran.
		for j := range x {
			x[j] += 0.5 * (nx[j] - x[j])
		}
		prev, fitted = s, nx
	}
	return fitted, prev, evals, nil
}

// sameSchedule reports whether two schedules ran the same steps for the
// same requests.
func sameSchedule(a, b *schedule) bool {
	if len(a.batches) != len(b.batches) || !slices.Equal(a.prefill, b.prefill) || !slices.Equal(a.decode, b.decode) {
		return false
	}
	for k := range a.batches {
		if !slices.Equal(a.batches[k].Seqs, b.batches[k].Seqs) {
			return false
		}
	}
	return true
}
