package calibrate

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// Config says what server the records came from and how to fit.
type Config struct {
	// Engine is what the server ran, in vLLM's names: model, GPU, tensor
	// parallel size, precisions, memory fraction and batch limits. Zero
	// batch limits take vLLM's defaults for the GPU; a Profile gives the
	// starting constants.
	Engine engine.Options
	// Start are the starting constants (zero: Engine's, which are the GPU
	// family's defaults unless Engine.Profile gives others).
	Start perfmodel.Efficiency
	// EngineVersion is recorded in the profile beside Engine.Engine, the
	// engine family.
	EngineVersion   string
	Bootstrap       int    // resamples for the confidence intervals (0: 16)
	Seed            uint64 // of the bootstrap
	MaxEvaluations  int    // per optimisation (0: 400)
	ConfidenceLevel float64
}

// Validate names the first setting of c that cannot be meant: the
// engine's (engine.Options.Validate), a negative count of resamples or
// evaluations, a confidence level outside [0, 1).
func (c Config) Validate() error {
	if err := c.Engine.Validate(); err != nil {
		return err
	}
	if err := field.Count("bootstrap", c.Bootstrap); err != nil {
		return err
	}
	if err := field.Count("max_evaluations", c.MaxEvaluations); err != nil {
		return err
	}
	if !(c.ConfidenceLevel >= 0 && c.ConfidenceLevel < 1) {
		return field.Invalid("confidence_level", c.ConfidenceLevel, "must be in [0, 1) (0: the default)")
	}
	return nil
}

// Result is a calibration: the profile written, the fit at the starting
// constants for comparison, and the optimiser's work.
type Result struct {
	Profile *perfmodel.Profile
	// Before are the residuals with the starting constants.
	Before      map[string]perfmodel.Residual
	Evaluations int
	// Warnings say where the fit is not to be taken at its word: a
	// constant at its bound, a metric whose tail the fitted constants
	// predict worse than the starting ones, constants the data could not
	// separate (docs/calibrate.md, "Warnings").
	Warnings []string
}

// fitted names the constants calibration moves; the others are held (see
// docs/calibrate.md: layer overhead and all-reduce latency are fixed costs
// per step, inseparable from the step overhead for one model and TP).
var fitted = []string{"compute", "memory", "step_overhead_us", "seq_overhead_us"}

type problem struct {
	base  perfmodel.Config
	eng   engine.Config
	start perfmodel.Efficiency
	obs   []results.Observed
	// anchored: every request carries the server's scheduling instant,
	// and the fit replays by it (replayAnchored).
	anchored bool
	// byInput lists request indices by prompt length, for aggregate.
	byInput []int
}

// efficiency maps the optimiser's point (log of each fitted constant over
// its start) to the model's factors; fractions are capped at 1.
func (p *problem) efficiency(x []float64) perfmodel.Efficiency {
	e := p.start
	e.Compute = min(1, e.Compute*math.Exp(x[0]))
	e.Memory = min(1, e.Memory*math.Exp(x[1]))
	e.StepOverhead = time.Duration(float64(max(p.start.StepOverhead, 50*time.Microsecond)) * math.Exp(x[2]))
	e.SeqOverhead = time.Duration(float64(max(p.start.SeqOverhead, 5*time.Microsecond)) * math.Exp(x[3]))
	return e
}

// engine returns the engine configuration timed with eff.
func (p *problem) engine(eff perfmodel.Efficiency) (engine.Config, error) {
	c := p.base
	c.Eff = eff
	est, err := perfmodel.New(c)
	if err != nil {
		return engine.Config{}, err
	}
	cfg := p.eng
	cfg.StepTimer = est
	return cfg, nil
}

// predict replays the measured arrivals with eff (replayFree): the twin's
// prediction, queueing included.
func (p *problem) predict(eff perfmodel.Efficiency) (replay, error) {
	cfg, err := p.engine(eff)
	if err != nil {
		return replay{}, err
	}
	return replayFree(cfg, p.obs)
}

// simulate replays the workload with eff as the fit compares it (anchored
// when the records allow) and returns per-request losses (Huber on the log
// ratio of simulated to measured TTFT, TPOT and E2E) and the replay.
func (p *problem) simulate(eff perfmodel.Efficiency) ([]float64, replay, error) {
	cfg, err := p.engine(eff)
	if err != nil {
		return nil, replay{}, err
	}
	var rp replay
	if p.anchored {
		rp, err = replayAnchored(cfg, p.obs)
	} else {
		rp, err = replayFree(cfg, p.obs)
	}
	if err != nil {
		return nil, replay{}, err
	}
	loss := make([]float64, len(p.obs))
	for i, o := range p.obs {
		st, se, sp := p.times(o, rp.timelines[i])
		// TTFT and E2E move in jumps of a step when a simulated arrival
		// falls on the other side of a step boundary; the server's prefill
		// (TTFT − queue) and TPOT change smoothly with the constants. With
		// the server's split, those carry the fit and TTFT/E2E a fifth.
		var l float64
		if o.ServerSide {
			l = 0.2*(huberReq(logRatio(st, o.TTFT))+huberReq(logRatio(se, o.E2E))) + huberReq(logRatio(sp, o.TTFT-o.Queue))
		} else {
			l = huberReq(logRatio(st, o.TTFT)) + huberReq(logRatio(se, o.E2E))
		}
		if mt, ok := o.TPOT(); ok && rp.timelines[i].OutputTokens > 1 {
			l += huberReq(logRatio((se-st)/time.Duration(rp.timelines[i].OutputTokens-1), mt))
		}
		loss[i] = l
	}
	return loss, rp, nil
}

// times are a replayed request's TTFT, E2E and prefill (first scheduled
// step to first token). An anchored replay does not simulate the queue:
// the measured queue stands for it.
func (p *problem) times(o results.Observed, tl engine.Timeline) (ttft, e2e, prefill time.Duration) {
	prefill = tl.FirstToken.Sub(tl.Scheduled)
	if p.anchored {
		return o.Queue + prefill, o.Queue + tl.Finished.Sub(tl.Scheduled), prefill
	}
	return tl.FirstToken.Sub(tl.Arrival), tl.Finished.Sub(tl.Arrival), prefill
}

// aggregate is the loss on weighted means over groups of requests of
// similar prompt length (deciles): a mean over many requests moves nearly
// smoothly with the constants, where single requests jump by a step; it
// carries the fit along ridges where the per-request loss is rugged.
func (p *problem) aggregate(tls []engine.Timeline, weights []float64) float64 {
	const groups = 10
	var sim, meas [groups][3]float64
	var n [groups]float64
	for j, i := range p.byInput {
		g := j * groups / len(p.byInput)
		o, tl := p.obs[i], tls[i]
		w := weights[i]
		if w == 0 {
			continue
		}
		st, se, pre := p.times(o, tl)
		mp, sp := o.TTFT, st
		if o.ServerSide {
			mp, sp = o.TTFT-o.Queue, pre
		}
		sim[g][0] += w * float64(sp)
		meas[g][0] += w * float64(mp)
		sim[g][1] += w * float64(se)
		meas[g][1] += w * float64(o.E2E)
		if mt, ok := o.TPOT(); ok && tl.OutputTokens > 1 {
			sim[g][2] += w * float64((se-st)/time.Duration(tl.OutputTokens-1))
			meas[g][2] += w * float64(mt)
		}
		n[g] += w
	}
	loss := 0.0
	for g := range groups {
		for k := range 3 {
			if meas[g][k] > 0 && sim[g][k] > 0 {
				r := math.Log(sim[g][k] / meas[g][k])
				loss += n[g] * 20 * r * r
			}
		}
	}
	return loss
}

// huberReq is the per-request Huber loss (requestHuber).
func huberReq(r float64) float64 { return huber(r, requestHuber) }

func logRatio(sim, meas time.Duration) float64 {
	return math.Log(float64(max(sim, time.Microsecond)) / float64(max(meas, time.Microsecond)))
}

// Calibrate fits the performance model's constants to the workload: it
// replays the requests' arrivals and lengths through the engine on the
// virtual clock and minimises the robust error between simulated and
// measured per-request TTFT, TPOT and E2E with Nelder–Mead (constants in
// log space), then refits on bootstrap resamples of the requests for the
// confidence intervals. With the server's scheduling instants (Anchored)
// it alternates between fixing the anchored replay's schedule and fitting
// the constants on it (fitAnchored); without them it minimises over whole
// replays, restarting four times.
func Calibrate(ctx context.Context, w *results.Observations, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p, err := newProblem(w, cfg)
	if err != nil {
		return nil, err
	}
	weights := make([]float64, len(w.Requests))
	for i := range weights {
		weights[i] = 1
	}
	maxEvals := cfg.MaxEvaluations
	if maxEvals <= 0 {
		maxEvals = 400
	}
	// Restarts from the best point with a fresh simplex: step boundaries
	// make the loss piecewise constant at fine scales, where one simplex can
	// collapse early along the memory/step-overhead ridge.
	evals := 0
	best := make([]float64, len(fitted))
	var sched *schedule
	if p.anchored {
		x, s, n, err := p.fitAnchored(ctx, best, weights, maxEvals)
		evals += n
		if err != nil {
			return nil, err
		}
		best, sched = x, s
	} else {
		for range 4 {
			x, n, err := p.minimize(ctx, best, weights, maxEvals)
			evals += n
			if err != nil {
				return nil, err
			}
			best = x
		}
	}
	nb := cfg.Bootstrap
	if nb <= 0 {
		nb = 16
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0xda3e39cb94b95bdb))
	samples := make([][]float64, len(fitted))
	for range nb {
		for i := range weights {
			weights[i] = 0
		}
		for range len(weights) {
			weights[rng.IntN(len(weights))]++
		}
		var x []float64
		var n int
		var err error
		if sched != nil {
			x, n, err = p.minimizeOnSchedule(ctx, sched, best, weights, maxEvals/2)
		} else {
			x, n, err = p.minimize(ctx, best, weights, maxEvals/3)
		}
		evals += n
		if err != nil {
			return nil, err
		}
		for j := range fitted {
			samples[j] = append(samples[j], x[j])
		}
	}
	return p.result(w, cfg, best, samples, evals)
}

func newProblem(w *results.Observations, cfg Config) (*problem, error) {
	ec, est, err := cfg.Engine.Config()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", results.ErrBadInput, err)
	}
	base := est.Config()
	start := cfg.Start
	if start == (perfmodel.Efficiency{}) {
		start = base.Eff
	}
	p := &problem{base: base, eng: ec, start: start, obs: w.Requests, anchored: len(w.Requests) > 0}
	for _, o := range w.Requests {
		p.anchored = p.anchored && o.Anchored
	}
	p.byInput = make([]int, len(w.Requests))
	for i := range p.byInput {
		p.byInput[i] = i
	}
	slices.SortStableFunc(p.byInput, func(a, b int) int { return w.Requests[a].Input - w.Requests[b].Input })
	if _, _, err := p.simulate(start); err != nil {
		return nil, fmt.Errorf("%w: the records cannot be replayed on %s: %v", results.ErrBadInput, base.Model.Name, err)
	}
	return p, nil
}

// minimize runs Nelder–Mead from x0 on the weighted loss of whole replays.
func (p *problem) minimize(ctx context.Context, x0, weights []float64, maxEvals int) ([]float64, int, error) {
	return search{simplex: 0.2, iters: 150, tol: 1e-10}.minimize(ctx, func(x []float64) (float64, error) {
		loss, rp, err := p.simulate(p.efficiency(x))
		if err != nil {
			return 0, err
		}
		s := 0.0
		for i, l := range loss {
			s += weights[i] * l
		}
		return s + p.aggregate(rp.timelines, weights), nil
	}, x0, maxEvals)
}

func (p *problem) result(w *results.Observations, cfg Config, best []float64, samples [][]float64, evals int) (*Result, error) {
	eff := p.efficiency(best)
	consts := perfmodel.ProfileFromEfficiency(eff)
	level := cfg.ConfidenceLevel
	if level <= 0 || level >= 1 {
		level = 0.9
	}
	interval := func(j int, v float64) perfmodel.Constant {
		lo, hi := v, v
		if len(samples[j]) > 0 {
			xs := slices.Clone(samples[j])
			slices.Sort(xs)
			e := func(x float64) perfmodel.Efficiency { y := slices.Clone(best); y[j] = x; return p.efficiency(y) }
			val := func(e perfmodel.Efficiency) float64 {
				switch j {
				case 0:
					return e.Compute
				case 1:
					return e.Memory
				case 2:
					return float64(e.StepOverhead) / 1e3
				}
				return float64(e.SeqOverhead) / 1e3
			}
			lo = min(v, val(e(stats.Percentile(xs, 100*(1-level)/2))))
			hi = max(v, val(e(stats.Percentile(xs, 100*(1-(1-level)/2)))))
		}
		return perfmodel.Constant{Value: v, Low: lo, High: hi, Fitted: true}
	}
	consts.Compute = interval(0, eff.Compute)
	consts.Memory = interval(1, eff.Memory)
	consts.StepOverheadUS = interval(2, float64(eff.StepOverhead)/1e3)
	consts.SeqOverheadUS = interval(3, float64(eff.SeqOverhead)/1e3)

	after, err := p.predict(eff)
	if err != nil {
		return nil, err
	}
	before, err := p.predict(p.start)
	if err != nil {
		return nil, err
	}
	pr := &perfmodel.Profile{
		Schema: perfmodel.ProfileSchema, Model: profileName(cfg.Engine.Model, p.base.Model.Name), GPU: p.base.GPU.Name,
		GPUFile: profileFile(cfg.Engine.GPUFile), TP: max(p.base.TP, 1),
		DType: string(p.base.WeightDType), KVDType: string(p.base.KVDType), Engine: familyName(cfg.Engine.Engine), EngineVersion: cfg.EngineVersion,
		Source: w.Dir, Requests: len(w.Requests), Constants: consts, Residuals: residuals(w.Requests, after.timelines),
		Range: fitRange(w.Requests, after.maxBatch), Scheduler: schedulerOf(p.eng),
	}
	res := &Result{Profile: pr, Before: residuals(w.Requests, before.timelines), Evaluations: evals}
	res.Warnings = fitWarnings(eff, samples, res.Before, pr.Residuals)
	return res, nil
}

// separable is the bootstrap correlation of two fitted constants (their
// log values over the resamples) past which the data could not tell them
// apart: the fit trades one for the other along a ridge.
const separable = 0.9

// fitWarnings: a fraction at its cap of 1 or an overhead fitted to nothing
// (the data wanted more of it, or none, than the model allows), a metric
// whose tail (P90, P99) the fitted constants predict worse than the
// starting ones, and pairs of constants the resamples moved together.
func fitWarnings(eff perfmodel.Efficiency, samples [][]float64, before, after map[string]perfmodel.Residual) []string {
	var out []string
	for _, b := range []struct {
		name  string
		at    bool
		bound string
	}{
		{"compute efficiency", eff.Compute >= 0.999, "its cap of 1"},
		{"memory efficiency", eff.Memory >= 0.999, "its cap of 1"},
		{"step overhead", eff.StepOverhead < time.Microsecond, "0"},
		{"sequence overhead", eff.SeqOverhead < 100*time.Nanosecond, "0"},
	} {
		if b.at {
			out = append(out, fmt.Sprintf("%s sits at %s: the data asked for more than the model allows, so the fit is pinned there and the other constants absorb the rest (is the GPU entry or the model right?)", b.name, b.bound))
		}
	}
	for _, m := range []string{"ttft", "tpot", "e2e"} {
		a, okA := after[m]
		s, okS := before[m]
		if !okA || !okS {
			continue
		}
		for _, q := range []struct {
			name         string
			fitted, prev float64
		}{{"P90", a.P90, s.P90}, {"P99", a.P99, s.P99}} {
			if q.fitted > q.prev+0.005 {
				out = append(out, fmt.Sprintf("%s %s: the fitted constants predict it worse than the starting ones (%.1f %% vs %.1f %% off): the fit traded the tail for the median", strings.ToUpper(m), q.name, 100*q.fitted, 100*q.prev))
			}
		}
	}
	for i := range samples {
		for j := i + 1; j < len(samples); j++ {
			// Two constants the resamples pinned (each within a fraction
			// of a percent) are told apart however their jitter correlates.
			if spread(samples[i]) < minSpread || spread(samples[j]) < minSpread {
				continue
			}
			if r := correlation(samples[i], samples[j]); math.Abs(r) >= separable {
				out = append(out, fmt.Sprintf("the data could not separate %s and %s (bootstrap correlation %+.2f): only a combination of them is fitted; more varied batch sizes or prompt lengths would tell them apart", fittedNames[i], fittedNames[j], r))
			}
		}
	}
	return out
}

// minSpread is the standard deviation of a constant's log over the
// resamples (0.5 %) below which the data pinned it.
const minSpread = 0.005

// spread is the standard deviation of xs.
func spread(xs []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	var m float64
	for _, x := range xs {
		m += x
	}
	m /= float64(len(xs))
	var v float64
	for _, x := range xs {
		v += (x - m) * (x - m)
	}
	return math.Sqrt(v / float64(len(xs)-1))
}

// fittedNames are fitted's constants as the output names them.
var fittedNames = []string{"compute efficiency", "memory efficiency", "step overhead", "sequence overhead"}

// correlation is Pearson's r of x and y (0 when either does not vary).
func correlation(x, y []float64) float64 {
	n := min(len(x), len(y))
	if n < 3 {
		return 0
	}
	var mx, my float64
	for k := range n {
		mx, my = mx+x[k], my+y[k]
	}
	mx, my = mx/float64(n), my/float64(n)
	var sxy, sxx, syy float64
	for k := range n {
		dx, dy := x[k]-mx, y[k]-my
		sxy, sxx, syy = sxy+dx*dy, sxx+dx*dx, syy+dy*dy
	}
	if sxx < 1e-18 || syy < 1e-18 {
		return 0
	}
	return sxy / math.Sqrt(sxx*syy)
}

func fitRange(obs []results.Observed, maxBatch int) perfmodel.FitRange {
	r := perfmodel.FitRange{BatchMin: 1, BatchMax: max(1, maxBatch), InputMin: math.MaxInt, OutputMin: math.MaxInt}
	for _, o := range obs {
		r.InputMin, r.InputMax = min(r.InputMin, o.Input), max(r.InputMax, o.Input)
		r.OutputMin, r.OutputMax = min(r.OutputMin, o.Output), max(r.OutputMax, o.Output)
	}
	return r
}

// residuals are the absolute relative errors of simulated against measured
// TTFT, TPOT and E2E at P50, P90 and P99 (nearest rank).
func residuals(obs []results.Observed, tls []engine.Timeline) map[string]perfmodel.Residual {
	var tt, tp, ee []float64
	rel := func(s, m time.Duration) float64 { return math.Abs(float64(s-m)) / float64(max(m, time.Microsecond)) }
	for i, o := range obs {
		tl := tls[i]
		st, se := tl.FirstToken.Sub(tl.Arrival), tl.Finished.Sub(tl.Arrival)
		tt = append(tt, rel(st, o.TTFT))
		ee = append(ee, rel(se, o.E2E))
		if mt, ok := o.TPOT(); ok && tl.OutputTokens > 1 {
			tp = append(tp, rel((se-st)/time.Duration(tl.OutputTokens-1), mt))
		}
	}
	out := map[string]perfmodel.Residual{}
	for name, xs := range map[string][]float64{"ttft": tt, "tpot": tp, "e2e": ee} {
		if len(xs) == 0 {
			continue
		}
		slices.Sort(xs)
		out[name] = perfmodel.Residual{P50: stats.Percentile(xs, 50), P90: stats.Percentile(xs, 90), P99: stats.Percentile(xs, 99)}
	}
	return out
}

// familyName is the engine family's own name for what the user gave
// (vLLM → vllm); empty stays empty.
func familyName(name string) string {
	if f, err := engine.LookupFamily(name); err == nil {
		return f.Name
	}
	return name
}

// profileName is how a profile names its model: the absolute path of a
// config.json given as a file or folder (its name alone is the folder's,
// which no catalog knows), else the catalog's name.
func profileName(given, name string) string {
	if _, err := os.Stat(given); err != nil || given == "" {
		return name
	}
	return profileFile(given)
}

// profileFile is path made absolute, so a profile used from another
// folder still finds it; "" stays "".
func profileFile(path string) string {
	if path == "" {
		return ""
	}
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// schedulerOf is the scheduler the fit replayed with, for the profile.
func schedulerOf(ec engine.Config) map[string]string {
	c := ec.WithDefaults()
	return map[string]string{"max_num_seqs": strconv.Itoa(c.MaxNumSeqs), "max_num_batched_tokens": strconv.Itoa(c.MaxNumBatchedTokens),
		"enable_prefix_caching": strconv.FormatBool(c.EnablePrefixCaching), "enable_chunked_prefill": strconv.FormatBool(!c.DisableChunkedPrefill)}
}
