package capacity

import (
	"math"
	"slices"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// Bound is what the roofline model says of a deployment before any
// simulation: the highest request rate it could sustain, and for each SLO
// the lowest its percentile could be at any rate (docs/plan.md, "Pruning").
type Bound struct {
	// MaxRate is an upper bound on the requests per second the replicas
	// can complete: each request's prefill at the compute roofline and its
	// decode at the largest batch the engine allows and its KV cache holds.
	MaxRate float64
	// MinValues[i] is a lower bound on SLO i's percentile: every request's
	// unloaded latency (its uncached prompt prefilled in one step, its
	// decode steps alone at batch 1, every speculative draft accepted).
	MinValues []time.Duration
	// UnloadedE2E is the mean of the requests' unloaded E2E, the scale of
	// how long a run must last to show a steady state (Options.MinSpan).
	UnloadedE2E time.Duration
	// perReplica is MaxRate of one aggregated replica; prefillRate and
	// decodeRate those of one replica that only prefills or only decodes
	// (a disaggregated pool's).
	perReplica, prefillRate, decodeRate float64
}

// at is b, computed for one replica, scaled to d's replicas: an
// aggregated deployment's rate is its replicas' sum; a disaggregated one
// completes no more than its slower pool, P × the prefill rate or D × the
// decode rate.
func (b Bound) at(d Deployment) Bound {
	b.MaxRate = b.perReplica * float64(d.Replicas)
	if d.Disaggregated() {
		b.MaxRate = min(b.prefillRate*float64(d.PrefillReplicas), b.decodeRate*float64(d.Replicas))
	}
	return b
}

// withPrefill is b with its prefill pool on another GPU, whose one
// replica's bounds are pre: that GPU's prefill rate, and each SLO's lower
// bound the lower of the two (a bound either engine could reach).
func (b Bound) withPrefill(pre Bound) Bound {
	b.prefillRate = pre.prefillRate
	b.MinValues = slices.Clone(b.MinValues)
	for i := range b.MinValues {
		if i < len(pre.MinValues) {
			b.MinValues[i] = min(b.MinValues[i], pre.MinValues[i])
		}
	}
	return b
}

// bound computes the roofline bounds of r on the workload's lengths l.
func (r *resolved) bound(l lengths, slos []latency.SLO) Bound {
	l = l.capped(r.MaxMaxTokens)
	c := r.ec.WithDefaults()
	e := r.est
	cached := func(i int) int {
		if !c.EnablePrefixCaching {
			return 0
		}
		return min(l.cacheable[i], l.in[i]-1)
	}
	k := c.Speculative.K
	tokensPerStep := 1.0 // output tokens a decoding sequence gains per step
	if k > 0 {
		tokensPerStep = perfmodel.ExpectedTokens(k, c.Speculative.Alpha)
	}
	// The largest decode batch: the engine's max_num_seqs, or the KV cache
	// over the smallest footprint a request can have (its uncached prompt).
	var uncached float64
	for i := range l.in {
		uncached += float64(l.in[i] - cached(i))
	}
	uncached /= float64(max(len(l.in), 1))
	kvTokens := float64(c.NumBlocks * c.BlockSize)
	batch := max(1, min(c.MaxNumSeqs, int(kvTokens/max(1, uncached))))
	ctx := int(mean(l.in) + mean(l.out)/2)
	var b perfmodel.Batch
	for range batch {
		if k > 0 {
			b.AddDecode(k+1, ctx)
		} else {
			b.AddDecode(1, ctx)
		}
	}
	b.DraftK = k
	dec := e.Breakdown(&b)
	perTok := float64(batch) * tokensPerStep
	decCompute := dec.Compute.Seconds() / perTok
	decMemory := dec.Memory.Seconds() / perTok
	decFixed := (dec.Comm + dec.Overhead + dec.Draft).Seconds() / perTok
	chunk := max(1, min(c.MaxNumBatchedTokens, int(uncached)))
	pre := e.PrefillStep(chunk)
	preCompute := pre.Compute.Seconds() / float64(chunk)
	var preComp, decComp, mem, fixed float64
	for i := range l.in {
		preComp += float64(l.in[i]-cached(i)) * preCompute
		decComp += float64(l.out[i]) * decCompute
		mem += float64(l.out[i]) * decMemory
		fixed += float64(l.out[i]) * decFixed
	}
	n := float64(max(len(l.in), 1))
	rate := func(seconds float64) float64 {
		if seconds > 0 {
			return n / seconds
		}
		return math.Inf(1)
	}
	bd := Bound{perReplica: rate(max(preComp+decComp, mem) + fixed), prefillRate: rate(preComp),
		decodeRate: rate(max(decComp, mem) + fixed)}
	bd = bd.at(r.Deployment)
	bd.MinValues, bd.UnloadedE2E = r.minValues(l, slos, cached, k)
	return bd
}

// minValues bounds each SLO's percentile from below by every request's
// unloaded latency.
func (r *resolved) minValues(l lengths, slos []latency.SLO, cached func(int) int, k int) ([]time.Duration, time.Duration) {
	e := r.est
	ttft := make([]int64, len(l.in))
	tpot := make([]int64, 0, len(l.in)) // requests of two tokens or more have a TPOT
	e2e := make([]int64, len(l.in))
	var b perfmodel.Batch
	for i := range l.in {
		ttft[i] = int64(e.PrefillStep(l.in[i] - cached(i)).Total)
		b.Reset()
		b.AddDecode(1, l.in[i])
		step := int64(e.Breakdown(&b).Total) / int64(k+1)
		if l.out[i] >= 2 {
			tpot = append(tpot, step)
		}
		e2e[i] = ttft[i] + int64(l.out[i]-1)*step
	}
	var sum float64
	for _, v := range e2e {
		sum += float64(v)
	}
	meanE2E := time.Duration(sum / float64(max(len(e2e), 1)))
	for _, xs := range [][]int64{ttft, tpot, e2e} {
		slices.Sort(xs)
	}
	out := make([]time.Duration, len(slos))
	for i, s := range slos {
		var xs []int64
		switch s.Metric {
		case latency.TTFT, latency.TTFTIntended:
			xs = ttft
		case latency.TPOT:
			xs = tpot
		case latency.E2E, latency.E2EIntended:
			xs = e2e
		}
		if len(xs) > 0 {
			out[i] = time.Duration(stats.Percentile(xs, s.Percentile))
		}
	}
	return out, meanE2E
}
