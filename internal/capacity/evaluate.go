package capacity

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/simulate"
	"github.com/tokentrace/tokentrace/internal/stats"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// Point is a deployment's simulated performance at one arrival rate.
type Point struct {
	// Rate is the offered arrival rate in requests per second.
	Rate float64
	// Meets reports that every SLO held.
	Meets bool
	// Values holds each SLO's measured percentile (of its metric, over the
	// measured requests; a failed request counts as infinitely late, so a
	// percentile that falls on one is Unbounded). Nil when Stopped.
	Values []time.Duration
	// Miss is the largest value ÷ threshold over the SLOs: at most 1 when
	// Meets; how far the worst SLO is missed otherwise.
	Miss float64
	// Measured counts the requests judged (warm-up excluded), Failed those
	// that did not succeed.
	Measured, Failed int
	// InputTokens and OutputTokens are the measured successful requests'.
	InputTokens, OutputTokens int64
	// Stopped is true when the simulation ended as soon as an SLO was
	// certain to fail (Options.StopEarly): only the verdict is known.
	Stopped bool
	// Growth is the fraction of the arrivals the deployment did not keep
	// up with, by Little's law from the time requests spend in the system
	// (E2E from the intended send): the mean of the requests sent in the
	// last third of the judged span minus that of the middle third's, over
	// a third's length, is s, and Growth s ÷ (1 + s) (judge.growth). A
	// deployment that keeps up holds its time in the system steady
	// whatever number of arrivals chance brings into either third (≈ 0);
	// one offered more than it completes accumulates the difference,
	// whether in its queue or in ever larger batches, and its requests
	// wait ever longer (→ 1 − completed ÷ offered). KeepsUp is Growth ≤
	// MaxGrowth. A run that falls behind fails whatever its percentiles:
	// over a finite run the backlog may not yet have reached the requests
	// the SLOs judge.
	Growth  float64
	KeepsUp bool
	// PeakBatch is the most requests one replica ran at once, as the
	// simulation's state was sampled (simulate.SampleInterval): what a
	// calibrated profile's batch range is checked against.
	PeakBatch int
	// Preemptions counts the replicas' KV-cache preemptions.
	Preemptions int64
}

// MaxGrowth is the largest Growth of a deployment that keeps up: it
// completes at least 95 % of what it is offered, the share bench's
// capacity search asks of a rate.
const MaxGrowth = 0.05

// Unbounded is the value of a percentile that falls on a failed request.
const Unbounded = time.Duration(math.MaxInt64)

// MeanOutput is the mean output tokens of a measured successful request.
func (p Point) MeanOutput() float64 {
	if ok := p.Measured - p.Failed; ok > 0 {
		return float64(p.OutputTokens) / float64(ok)
	}
	return 0
}

// Options tune evaluations.
type Options struct {
	// Seed seeds the workload's draws and every replica's engine (replica
	// i with Seed + i); every rate of every candidate uses the same seed,
	// so that they are compared on the same requests.
	Seed uint64
	// StopEarly ends a simulation as soon as an SLO is certain to fail
	// (enough requests already miss it); the Point then has no Values.
	StopEarly bool
	// MinSpan is the least time the arrivals of a run with an open-loop
	// rate span: its measured requests are raised to rate × MinSpan, so
	// that a high rate is judged on a steady state and not on a burst a
	// large batch absorbs, and the deployment has filled its batches and
	// settled (that takes several loaded E2Es). 0: DefaultMinSpan or 40
	// unloaded E2Es, whichever is longer. Fixed arrivals (a trace) keep their requests.
	MinSpan time.Duration
	// Force runs simulations and plans over their bounds
	// (simulate.Preflight's, MaxPlanRequests).
	Force bool
	// Records, when set, is given every simulated record, warm-up and
	// cool-down included, with its token times (the simulator reuses the
	// record's memory after the call).
	Records func(*latency.Record)
}

// DefaultMinSpan is the least span of a run's arrivals (Options.MinSpan).
const DefaultMinSpan = time.Minute

// Cooldown is the fraction of a run's measured requests, the last sent,
// that are simulated but not judged: they meet a deployment that drains
// as arrivals stop, as the first meet one that fills (the warm-up).
const Cooldown = 0.1

// Evaluate simulates the deployment serving the workload at rate requests
// per second and judges the SLOs: the API for "this run's workload, with
// one lever changed" (docs/plan.md, "From Go").
func Evaluate(d Deployment, w Workload, slos []latency.SLO, rate float64, o Options) (Point, error) {
	r, err := d.resolve()
	if err != nil {
		return Point{}, err
	}
	return r.evaluate(w, slos, rate, o)
}

// evaluate runs one simulation at rate.
func (r *resolved) evaluate(w Workload, slos []latency.SLO, rate float64, o Options) (Point, error) {
	if !(rate > 0) || math.IsInf(rate, 0) {
		return Point{}, fmt.Errorf("rate %v: must be a positive number of requests per second", rate)
	}
	src, load := r.runLoad(w, slos, rate, o)
	ec := r.ec
	ec.Seed = o.Seed
	var err error
	j := newJudge(slos, load.Requests, cooldownCutoff(load))
	cfg := simulate.Config{
		Engine: ec, Replicas: r.Replicas, Balancer: r.Balancer,
		Workload: withCap(lengthsOnly(src, r.ec.EnablePrefixCaching), r.MaxMaxTokens), Load: load, IgnoreEOS: w.IgnoreEOS, Network: w.Network,
		NoTokenTimes: !j.needsTokens() && o.Records == nil, RecycleRecords: true, SampleInterval: simulate.SampleInterval, Force: o.Force,
	}
	if cfg.FrontEnd, err = r.frontEnd(); err != nil {
		return Point{}, err
	}
	if r.ShortestFirst {
		cfg.Priority = shortestFirst
	}
	if r.Disaggregated() {
		cfg.PrefillReplicas = r.PrefillReplicas
		if cfg.Engine.KVLink, err = r.link(); err != nil {
			return Point{}, err
		}
		if r.pre != nil {
			pec := r.pre.ec
			pec.Seed, pec.KVLink = o.Seed, cfg.Engine.KVLink
			cfg.PrefillEngine = &pec
		}
	}
	if o.StopEarly {
		cfg.Stop = j.stop
	}
	emit := j.add
	if o.Records != nil {
		emit = func(rec *latency.Record) { j.add(rec); o.Records(rec) }
	}
	res, err := simulate.Run(cfg, emit)
	if err != nil {
		return Point{}, err
	}
	p := j.point(rate)
	p.Stopped = res.Stopped
	for _, s := range res.Samples {
		p.PeakBatch = max(p.PeakBatch, int(math.Ceil(float64(s.Running)/float64(r.Replicas+r.PrefillReplicas))))
	}
	for _, rr := range res.Replicas {
		p.Preemptions += rr.Stats.Preemptions
	}
	if p.Stopped {
		p.Values, p.Meets, p.Miss = nil, false, math.Inf(1)
	}
	return p, nil
}

// runLoad is the load one simulation at rate runs: the workload's, its
// measured requests raised to span the least time (Options.MinSpan), with
// the default warm-up.
func (r *resolved) runLoad(w Workload, slos []latency.SLO, rate float64, o Options) (workload.Source, workload.Load) {
	src, load := w.At(rate)
	load.Seed = o.Seed
	if load.Arrivals == nil && load.Requests > 0 && !w.Closed {
		span := o.MinSpan
		if span == 0 {
			span = max(DefaultMinSpan, 40*r.unloadedE2E(w, slos))
		}
		load.Requests = max(load.Requests, int(min(math.Ceil(rate*span.Seconds()), math.MaxInt32)))
	}
	if w.DefaultWarmup {
		load.WarmupRequests, load.WarmupDuration = load.Requests/10, 0
	}
	return src, load
}

// growth measures, by Little's law, whether the deployment keeps up from
// the time requests spend in the system (W = L ÷ λ, measured per request
// as E2E from the intended send, so that it is normalised by the arrivals
// each third was actually offered): the mean of the requests sent in the
// last third of the judged span against those sent in the middle third,
// their difference over a third's length being the slope s of the time in
// the system. A deployment that keeps up holds it steady, however many
// requests chance brought into either third (s ≈ 0); one completing μ of
// the λ offered per second adds λ − μ to its backlog each second, so each
// request waits longer than one sent a second before by (λ − μ) ÷ μ = s,
// and the fraction not kept up with, 1 − μ/λ, is s ÷ (1 + s). The first
// third is the deployment settling after the warm-up.
func (j *judge) growth() (float64, bool) {
	n := len(j.sends)
	if n < 6 {
		return 0, false
	}
	t0, t1 := slices.Min(j.sends), slices.Max(j.sends)
	if !(t1 > t0) {
		return 0, false
	}
	third := (t1 - t0) / 3
	meanE2E := func(a, b float64) (float64, bool) { // of the requests sent in [a, b), t1 in the last
		var sum float64
		k := 0
		for i, s := range j.sends {
			if s >= a && (s < b || s == t1) {
				sum += j.e2es[i]
				k++
			}
		}
		return sum / float64(max(k, 1)), k > 0
	}
	w2, ok2 := meanE2E(t0+third, t0+2*third)
	w3, ok3 := meanE2E(t0+2*third, t1)
	if !ok2 || !ok3 {
		return 0, false
	}
	if s := (w3 - w2) / third; s > 0 {
		return s / (1 + s), true
	} else {
		return s, true // shortening: keeps up (the fraction has no meaning here)
	}
}

// unloadedE2E is the deployment's mean unloaded E2E on the workload,
// computed once.
func (r *resolved) unloadedE2E(w Workload, slos []latency.SLO) time.Duration {
	if r.e2e == 0 {
		r.e2e = max(1, r.bound(w.sampleLengths(min(max(w.Load.Requests, 1), 2000)), slos).UnloadedE2E)
	}
	return r.e2e
}

// cooldownCutoff is the intended send instant of the last request judged:
// the one Cooldown of the measured requests before the last.
func cooldownCutoff(load workload.Load) int64 {
	var a workload.Arrivals
	if load.Arrivals != nil {
		a = load.Arrivals()
	} else {
		var err error
		if a, err = workload.NewArrivals(load.Arrival, load.Rate, load.Burstiness, load.Seed); err != nil {
			return math.MaxInt64
		}
	}
	k := load.WarmupRequests + max(1, int(math.Ceil(float64(load.Requests)*(1-Cooldown))))
	at := time.Duration(math.MaxInt64)
	for i := 0; i < k; i++ {
		t, ok := a.Next()
		if !ok {
			break
		}
		at = t
	}
	return int64(at)
}

// judge collects what the SLOs need from each record and can tell, while
// the simulation runs, that one of them is already lost.
type judge struct {
	slos     []latency.SLO
	values   [][]int64 // per SLO: per-request values (ITL/ICL: every gap)
	misses   []int     // per SLO: values above the threshold so far
	lost     []int     // per SLO (but ITL/ICL): misses at which it fails; 0: unknown
	measured int
	failed   int
	in, out  int64
	gaps     []int64
	dead     bool

	sends  []float64 // judged successes: intended send (s)
	e2es   []float64 // and E2E from it (s)
	cutoff int64     // records sent later are the cool-down
}

// newJudge prepares to judge slos over at most n measured requests (0:
// unknown), those intended to be sent by cutoff.
func newJudge(slos []latency.SLO, n int, cutoff int64) *judge {
	j := &judge{slos: slos, values: make([][]int64, len(slos)), misses: make([]int, len(slos)), lost: make([]int, len(slos)), cutoff: cutoff}
	for i, s := range slos {
		if n > 0 && s.Metric != latency.ITL && s.Metric != latency.ICL {
			// The percentile is the Rank-th smallest: it exceeds the
			// threshold once n − Rank + 1 values do.
			j.lost[i] = int(int64(n) - stats.Rank(s.Percentile, int64(n)) + 1)
		}
	}
	return j
}

func (j *judge) needsTokens() bool {
	for _, s := range j.slos {
		if s.Metric == latency.ITL || s.Metric == latency.ICL {
			return true
		}
	}
	return false
}

func (j *judge) stop() bool { return j.dead }

// add takes one record (the simulator reuses its memory afterwards).
func (j *judge) add(rec *latency.Record) {
	if rec.Warmup || rec.IntendedNS > j.cutoff {
		return
	}
	j.measured++
	ok := rec.OK()
	if !ok {
		j.failed++
	} else {
		j.in += int64(rec.InputTokens)
		j.out += int64(rec.OutputTokens)
		j.sends = append(j.sends, float64(rec.IntendedNS)/1e9)
		j.e2es = append(j.e2es, float64(rec.EndNS-rec.IntendedNS)/1e9)
	}
	for i, s := range j.slos {
		switch s.Metric {
		case latency.ITL, latency.ICL:
			if !ok {
				j.values[i] = append(j.values[i], math.MaxInt64)
				j.misses[i]++
				continue
			}
			if s.Metric == latency.ITL {
				j.gaps = rec.ITLs(j.gaps[:0])
			} else {
				j.gaps = rec.ICLs(j.gaps[:0])
			}
			for _, g := range j.gaps {
				j.values[i] = append(j.values[i], g)
				if g > int64(s.Max) {
					j.misses[i]++
				}
			}
			continue
		}
		v := int64(math.MaxInt64)
		if ok {
			d, has := rec.Value(s.Metric)
			if !has {
				continue // TPOT of a one-token answer
			}
			v = int64(d)
		}
		j.values[i] = append(j.values[i], v)
		if v > int64(s.Max) {
			j.misses[i]++
			if j.lost[i] > 0 && j.misses[i] >= j.lost[i] {
				j.dead = true
			}
		}
	}
}

// point judges the SLOs on what was collected.
func (j *judge) point(rate float64) Point {
	p := Point{Rate: rate, Measured: j.measured, Failed: j.failed, InputTokens: j.in, OutputTokens: j.out, Meets: true}
	p.Values = make([]time.Duration, len(j.slos))
	for i, s := range j.slos {
		vs := j.values[i]
		slices.Sort(vs)
		v := Unbounded
		if len(vs) > 0 {
			v = time.Duration(stats.Percentile(vs, s.Percentile))
		} else if j.failed == 0 {
			v = 0 // no request has the metric (one-token answers): nothing to miss
		}
		p.Values[i] = v
		ratio := math.Inf(1)
		if v != Unbounded {
			ratio = float64(v) / float64(s.Max)
		}
		p.Miss = max(p.Miss, ratio)
		if v > s.Max {
			p.Meets = false
		}
	}
	p.KeepsUp = true
	if g, ok := j.growth(); ok {
		p.Growth = g
		if p.Growth > MaxGrowth {
			p.KeepsUp, p.Meets = false, false
			p.Miss = max(p.Miss, p.Growth/MaxGrowth)
		}
	}
	if j.measured == 0 {
		p.Meets, p.Miss = false, math.Inf(1)
	}
	return p
}
