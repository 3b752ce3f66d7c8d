package whatif

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tokentrace/tokentrace/internal/capacity"
	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/prediction"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// Baseline is the run as the twin runs it.
type Baseline struct {
	// Deployment is the run's engine and replicas; Workload its requests
	// at their own rate.
	Deployment capacity.Deployment
	Workload   capacity.Workload
	// Basis says what the twin is: "simulated run", "embedded engine", or
	// "profile FILE".
	Basis string
	// Notes are what the caller knows the twin leaves out (e.g. prefix
	// sharing a folder's records do not carry); shown with every
	// prediction.
	Notes []string
	// Outputs are the run's successful requests' output lengths (the P90
	// cap), Inputs their prompt lengths (the profile's range check).
	Outputs, Inputs []int
}

// Options choose the levers and their settings.
type Options struct {
	// SLOs are the run's objectives; without any, predictions are the P99
	// of the metrics the findings are about, and no goodput is searched.
	SLOs []latency.SLO
	// Levers names the levers to try (LeverNames); empty: those the
	// findings' remedies name; "all": every one.
	Levers []string
	// MaxTokensCap is a cap on max_tokens to try besides the P90 output.
	MaxTokensCap int
	// SpeculativeK and SpeculativeAlpha are the speculative decoding tried.
	SpeculativeK     int
	SpeculativeAlpha float64
	// Seed seeds every simulation (the same for all).
	Seed uint64
	// Parallel bounds simulations at once (0: one per CPU).
	Parallel int
	// KVLink is the link "disaggregate" pulls the KV cache over
	// (perfmodel.LinkNames; empty: perfmodel.DefaultLink).
	KVLink string
}

func (o Options) all() bool { return slices.Contains(o.Levers, "all") }

// Check names a lever that does not exist, or a setting out of range.
func (o Options) Check() error {
	for _, l := range o.Levers {
		if l != "all" && !slices.Contains(LeverNames(), l) {
			return field.Invalid("what_if", l, "unknown lever (known: all, %s)", strings.Join(LeverNames(), ", "))
		}
	}
	switch {
	case o.MaxTokensCap < 0:
		return field.Invalid("max_tokens_cap", o.MaxTokensCap, "must not be negative")
	case o.SpeculativeK < 1:
		return field.Invalid("speculative_k", o.SpeculativeK, "what-if needs at least one drafted token")
	case !(o.SpeculativeAlpha > 0 && o.SpeculativeAlpha < 1):
		return field.Invalid("speculative_alpha", o.SpeculativeAlpha, "must be in (0, 1)")
	}
	if o.KVLink != "" {
		if _, err := perfmodel.LookupLink(o.KVLink); err != nil {
			return field.Invalid("kv_link", o.KVLink, "%w", err)
		}
	}
	return nil
}

// OneRunNote is the note of a report the what-if skips by the one-run rule
// (OneRun), when a profile or levers were asked for.
const OneRunNote = "what-if: needs one run at one load (not several inputs or a sweep); skipped"

// OneRun is the what-if's one-run rule: it prices a report of one input
// (inputs, the paths given) holding one run at one load — not several
// runs, nor a sweep's points.
func OneRun(inputs int, rep *report.Report) bool {
	if inputs != 1 || len(rep.Runs) > 1 {
		return false
	}
	return len(rep.Runs) == 0 || len(rep.Runs[0].Points) == 0
}

// Called says whether a finding of the run calls for a lever what-if
// predicts: a rule a lever answers, or a failed SLO no rule accounts for.
func Called(rep *report.Report) bool {
	for _, f := range rep.Findings {
		if f.Rule == report.RuleSLOBreach {
			return true
		}
		for _, l := range levers {
			if slices.Contains(l.rules, f.Rule) {
				return true
			}
		}
	}
	return false
}

// unjudged is the threshold of an objective without an SLO: none.
const unjudged = time.Duration(math.MaxInt64 / 2)

// Run predicts each remedy. It returns nil when no finding names a lever
// (and none was asked for).
func Run(ctx context.Context, b Baseline, rep *report.Report, o Options) (*prediction.Predictions, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	start := time.Now()
	r := &runner{b: b, o: o, tmp: ""}
	defer r.cleanup()
	if err := r.prepare(rep); err != nil {
		return nil, err
	}
	vs := r.variants(rep)
	if len(vs) == 0 {
		return nil, nil
	}
	w := &prediction.Predictions{Basis: b.Basis, Deployment: r.baseName, Workload: b.Workload.Describe, Seed: o.Seed,
		Judged: r.judged, MeasuredMS: r.measured(rep)}
	for _, s := range r.slos {
		if r.judged {
			w.Objectives = append(w.Objectives, s.String())
		} else {
			w.Objectives = append(w.Objectives, fmt.Sprintf("%s:p99", s.Metric))
		}
	}
	base, err := r.point(b.Deployment, 0)
	if err != nil {
		return nil, fmt.Errorf("what-if: the run's own deployment: %w", err)
	}
	w.Baseline = base.view
	if r.baseFlags, err = r.b.Deployment.OutsideEnvelope(base.p); err != nil {
		return nil, fmt.Errorf("what-if: the run's own deployment: %w", err)
	}
	if w.Interval80, err = interval80(r.b.Deployment, base.p); err != nil {
		return nil, fmt.Errorf("what-if: the run's own deployment: %w", err)
	}
	w.Remedies = make([]prediction.Remedy, len(vs))
	g := errgroup.Group{}
	g.SetLimit(r.parallel())
	for i, v := range vs {
		g.Go(func() error {
			if err := ctx.Err(); err != nil {
				return err
			}
			w.Remedies[i] = r.remedy(v, base)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	w.Fidelity, w.StatedError, w.Unreliable = r.fidelity(w.MeasuredMS, base.view.ValuesMS)
	if w.Unreliable == "" {
		rank(w)
	}
	w.Assumptions = r.assumptions()
	if !w.Baseline.KeepsUp || slices.ContainsFunc(w.Remedies, func(x prediction.Remedy) bool { return x.Error == "" && !x.After.KeepsUp }) {
		w.Assumptions = append(w.Assumptions, FallsBehind)
	}
	for _, f := range r.baseFlags {
		w.Assumptions = append(w.Assumptions, "the run itself lies outside the twin's envelope: "+f)
	}
	w.Simulations = int(r.sims.Load())
	w.ElapsedS = time.Since(start).Seconds()
	return w, nil
}

// runner holds one what-if's state.
type runner struct {
	b        Baseline
	o        Options
	c        *state
	slos     []latency.SLO
	judged   bool
	baseName string
	prof     *perfmodel.Profile
	tmp      string // profiles carried to other TPs or precisions
	tmpOnce  sync.Mutex
	sims     atomic.Int64
	inRange  [2]int
	outRange [2]int
	// baseFlags are where the run's own case lies outside the twin's
	// envelope; a remedy is flagged for what it adds.
	baseFlags []string
}

func (r *runner) parallel() int {
	if r.o.Parallel > 0 {
		return r.o.Parallel
	}
	return runtime.GOMAXPROCS(0)
}

func (r *runner) cleanup() {
	if r.tmp != "" {
		_ = os.RemoveAll(r.tmp) // temporary profiles; nothing to do if they stay
	}
}

// prepare resolves the run's deployment and picks the objectives.
func (r *runner) prepare(rep *report.Report) error {
	d := r.b.Deployment
	if d.Replicas < 1 {
		d.Replicas = 1
		r.b.Deployment = d
	}
	ec, est, err := d.Engine.Config()
	if err != nil {
		return err
	}
	pc := est.Config()
	if pc.WeightDType == "" {
		pc.WeightDType = perfmodel.BF16
	}
	if pc.KVDType == "" {
		pc.KVDType = perfmodel.BF16
	}
	if d.Engine.Profile != "" {
		if r.prof, err = perfmodel.LoadProfile(d.Engine.Profile); err != nil {
			return field.Wrap("profile", err)
		}
	}
	r.c = &state{base: d, ec: ec.WithDefaults(), pc: pc, findings: map[string]bool{}, o: r.o, rate: r.b.Workload.Rate}
	for _, f := range rep.Findings {
		r.c.findings[f.Rule] = true
		if v := f.Numbers["suggested_max_num_batched_tokens"]; f.Rule == report.RulePrefillInterference && v >= 1 {
			r.c.budget = int(v)
		}
	}
	r.c.p90Output, r.c.maxOutput = percentile(r.b.Outputs, 90), slices.Max(append([]int{0}, r.b.Outputs...))
	r.inRange, r.outRange = span(r.b.Inputs), span(r.b.Outputs)
	r.baseName = describe(d, r.c)
	r.pickObjectives(rep)
	return nil
}

// pickObjectives: the SLOs, failing first; without any, the P99 of each
// finding's metric.
func (r *runner) pickObjectives(rep *report.Report) {
	if len(r.o.SLOs) > 0 {
		r.judged = true
		failing := map[string]bool{}
		for _, v := range rep.SLOs {
			failing[v.SLO] = v.Status == report.StatusFail
		}
		r.slos = slices.Clone(r.o.SLOs)
		slices.SortStableFunc(r.slos, func(a, b latency.SLO) int {
			fa, fb := failing[a.String()], failing[b.String()]
			switch {
			case fa && !fb:
				return -1
			case fb && !fa:
				return 1
			}
			return 0
		})
		if c := r.c; c != nil {
			for _, s := range r.slos {
				if s.Metric == latency.TTFT || s.Metric == latency.TTFTIntended {
					c.sloTTFT = s.Max.Seconds()
					break
				}
			}
		}
		return
	}
	seen := map[latency.Metric]bool{}
	for _, f := range rep.Findings {
		if rule, ok := report.RuleNamed(f.Rule); ok && rule.About != "" && !seen[rule.About] {
			m := rule.About
			seen[m] = true
			r.slos = append(r.slos, latency.SLO{Metric: m, Percentile: 99, Max: unjudged})
		}
	}
	if len(r.slos) == 0 { // levers asked for, no finding about a metric
		for _, m := range []latency.Metric{latency.TTFT, latency.TPOT, latency.E2E} {
			r.slos = append(r.slos, latency.SLO{Metric: m, Percentile: 99, Max: unjudged})
		}
	}
}

// variants lists the deployments to simulate: the levers the findings'
// remedies name (or those asked for).
func (r *runner) variants(rep *report.Report) []variant {
	failing := map[latency.Metric]bool{}
	for _, v := range rep.SLOs {
		if v.Status == report.StatusFail {
			failing[v.Metric] = true
		}
	}
	var out []variant
	for _, l := range levers {
		var why []string
		for _, rule := range l.rules {
			if r.c.findings[rule] {
				why = append(why, rule)
			}
		}
		if r.c.findings[report.RuleSLOBreach] {
			for _, m := range l.metrics {
				if failing[m] {
					why = append(why, report.RuleSLOBreach)
					break
				}
			}
		}
		asked := r.o.all() || slices.Contains(r.o.Levers, l.name)
		if len(r.o.Levers) > 0 && !asked || len(r.o.Levers) == 0 && len(why) == 0 {
			continue
		}
		if llamaCpp(r.c.base) && slices.Contains(notInLlamaCpp, l.name) {
			continue // a lever llama-server does not have
		}
		for _, v := range l.variants(r.c) {
			if v.lever == "" {
				v.lever = l.name
			}
			v.forRules = why
			out = append(out, inLlamaCppTerms(r.c, v))
		}
	}
	return out
}

// evaluated is a simulated point and its view in the report.
type evaluated struct {
	p    capacity.Point
	view prediction.WhatIfPoint
}

// point simulates d on the run's workload at its own rate (every request
// of the run, none added; a closed loop as the run's loop) and, with SLOs,
// searches an open loop's goodput from guess (0: the run's rate).
func (r *runner) point(d capacity.Deployment, guess float64) (evaluated, error) {
	w := r.b.Workload
	p, err := capacity.Evaluate(d, w, r.slos, w.Rate, capacity.Options{Seed: r.o.Seed, MinSpan: time.Nanosecond})
	r.sims.Add(1)
	if err != nil {
		return evaluated{}, err
	}
	e := evaluated{p: p, view: prediction.WhatIfPoint{Meets: p.Meets && r.judged, KeepsUp: p.KeepsUp, PeakBatch: p.PeakBatch}}
	if p.Measured > 0 {
		e.view.FailedShare = float64(p.Failed) / float64(p.Measured)
	}
	for _, v := range p.Values {
		if v == capacity.Unbounded {
			e.view.ValuesMS = append(e.view.ValuesMS, nil)
			continue
		}
		ms := float64(v) / 1e6
		e.view.ValuesMS = append(e.view.ValuesMS, &ms)
	}
	if r.judged && !w.Closed { // a closed loop's rate follows its latencies: no goodput to search
		if guess <= 0 {
			guess = w.Rate
		}
		g, err := capacity.FindGoodput(d, w, r.slos, guess, 0, capacity.Options{Seed: r.o.Seed, StopEarly: true})
		r.sims.Add(int64(g.Simulations))
		if err != nil {
			return evaluated{}, err
		}
		e.view.GoodputRPS = g.Rate
		if g.Rate >= w.Rate {
			// It kept up over a minute of arrivals at its goodput, at or
			// above the run's rate: the short replay's backlog was chance.
			e.view.KeepsUp = true
		}
	}
	return e, nil
}

// remedy simulates one variant against the baseline.
func (r *runner) remedy(v variant, base evaluated) prediction.Remedy {
	rem := prediction.Remedy{Lever: v.lever, Title: v.title, Setting: v.setting, For: v.forRules, Assumes: v.assumes}
	d := v.d
	if v.retime != nil && r.prof != nil {
		path, note, err := r.carryProfile(*v.retime)
		if err != nil {
			rem.Error = err.Error()
			return rem
		}
		d.Engine.Profile = path
		rem.Extrapolates = append(rem.Extrapolates, note)
	}
	if v.search {
		n, err := r.replicasNeeded(d)
		if err != nil {
			rem.Error = err.Error()
			return rem
		}
		d.Replicas = n
		rem.Title = fmt.Sprintf("%d replicas", n)
		rem.Setting = fmt.Sprintf("replicas: %d → %d", r.b.Deployment.Replicas, n)
	}
	rem.Applied, rem.GatewayApply = applied(rem.Lever, d), gatewayApplied(rem.Lever, d)
	e, err := r.point(d, base.view.GoodputRPS)
	if err != nil {
		var fe *field.Error
		if errors.As(err, &fe) {
			rem.Error = fe.Error()
		} else {
			rem.Error = err.Error()
		}
		return rem
	}
	rem.After = e.view
	rem.Effect = effect(base.view, e.view)
	rem.Extrapolates = append(rem.Extrapolates, r.outOfRange(e.p.PeakBatch, d.MaxMaxTokens)...)
	flags, err := d.OutsideEnvelope(e.p)
	if err != nil {
		rem.Error = err.Error()
		return rem
	}
	for _, f := range flags {
		if !slices.Contains(r.baseFlags, f) {
			rem.Extrapolates = append(rem.Extrapolates, "outside the twin's envelope: "+f)
		}
	}
	if rem.Interval80, err = interval80(d, e.p); err != nil {
		rem.Error = err.Error()
	}
	return rem
}

// interval80 is the twin's 80 % interval for p, a point of d
// (capacity.Deployment.Interval80), as what-if's result carries it.
func interval80(d capacity.Deployment, p capacity.Point) (*prediction.Interval, error) {
	iv, _, err := d.Interval80(p)
	if err != nil {
		return nil, err
	}
	return &prediction.Interval{TTFT: iv.TTFT, TPOT: iv.TPOT, E2E: iv.E2E, From: iv.From, Outside: iv.Outside}, nil
}

// replicasNeeded is the fewest replicas, from d's, at which every SLO holds
// at the run's rate (at most 8 × the run's, and 64).
func (r *runner) replicasNeeded(d capacity.Deployment) (int, error) {
	limit := min(64, 8*r.b.Deployment.Replicas)
	w := r.b.Workload
	for n := d.Replicas; n <= limit; n++ {
		d.Replicas = n
		p, err := capacity.Evaluate(d, w, r.slos, w.Rate, capacity.Options{Seed: r.o.Seed, MinSpan: time.Nanosecond, StopEarly: true})
		r.sims.Add(1)
		if err != nil {
			return 0, err
		}
		if p.Meets {
			return n, nil
		}
	}
	if w.Closed {
		return 0, fmt.Errorf("no number of replicas up to %d meets the SLOs with the run's closed loop", limit)
	}
	return 0, fmt.Errorf("no number of replicas up to %d meets the SLOs at %.3g req/s", limit, w.Rate)
}

// effect is after ÷ before on the first objective (nil when either is a
// failed request or zero).
func effect(before, after prediction.WhatIfPoint) *float64 {
	if len(before.ValuesMS) == 0 || len(after.ValuesMS) == 0 || before.ValuesMS[0] == nil || after.ValuesMS[0] == nil || *before.ValuesMS[0] <= 0 {
		return nil
	}
	e := *after.ValuesMS[0] / *before.ValuesMS[0]
	return &e
}

// rank orders w's remedies by their effect on the first objective, best
// first; then by goodput; those with no finite effect last. A remedy that
// is not ranked (prediction.Predictions.Ranked: its prediction
// extrapolates, outside the twin's envelope or a profile's range) never
// is: all such follow the others, in their order.
func rank(w *prediction.Predictions) {
	rs := w.Remedies
	key := func(r prediction.Remedy) float64 {
		if r.Effect == nil {
			return math.Inf(1)
		}
		return *r.Effect
	}
	slices.SortStableFunc(rs, func(a, b prediction.Remedy) int {
		xa, xb := !w.Ranked(a), !w.Ranked(b)
		if xa != xb {
			if xa {
				return 1
			}
			return -1
		}
		if xa {
			return 0
		}
		ka, kb := key(a), key(b)
		switch {
		case ka < kb:
			return -1
		case ka > kb:
			return 1
		case a.After.GoodputRPS > b.After.GoodputRPS:
			return -1
		case a.After.GoodputRPS < b.After.GoodputRPS:
			return 1
		}
		return 0
	})
}

// carryProfile writes the run's profile with its constants carried to
// another TP or precision (the profile then matches that engine), and
// says so.
func (r *runner) carryProfile(t retime) (string, string, error) {
	r.tmpOnce.Lock()
	defer r.tmpOnce.Unlock()
	if r.tmp == "" {
		dir, err := os.MkdirTemp("", "tokentrace-whatif-")
		if err != nil {
			return "", "", err
		}
		r.tmp = dir
	}
	p := *r.prof
	p.TP, p.DType, p.KVDType = t.tp, t.dtype, t.kvDType
	path := filepath.Join(r.tmp, fmt.Sprintf("tp%d-%s-%s.yaml", t.tp, t.dtype, t.kvDType))
	if err := p.WriteFile(path); err != nil {
		return "", "", err
	}
	return path, fmt.Sprintf("the profile was fitted at TP%d, %s weights, %s KV cache; its constants are carried to TP%d, %s weights, %s KV cache",
		r.prof.TP, r.prof.DType, r.prof.KVDType, t.tp, t.dtype, t.kvDType), nil
}

// outOfRange says where a prediction leaves the profile's fitted range.
func (r *runner) outOfRange(batch, capTokens int) []string {
	if r.prof == nil {
		return nil
	}
	out := r.outRange
	if capTokens > 0 {
		out = [2]int{min(out[0], capTokens), min(out[1], capTokens)}
	}
	var notes []string
	for _, pt := range [][3]int{{max(batch, r.prof.Range.BatchMin), r.inRange[0], out[0]}, {max(batch, 1), r.inRange[1], out[1]}} {
		notes = append(notes, r.prof.OutOfRange(pt[0], pt[1], pt[2])...)
	}
	slices.Sort(notes)
	return slices.Compact(notes)
}

// FallsBehind defines the words a prediction carries when its deployment
// did not keep up with the run's arrivals (capacity.MaxGrowth).
const FallsBehind = "falls behind: at the run's rate the twin completed under 95% of what it was offered — requests " +
	"pile up in flight faster than they end, so its percentiles would only grow with a longer run (docs/plan.md)"

// assumptions hold for every prediction.
func (r *runner) assumptions() []string {
	out := []string{
		"each prediction is one simulation of the run's own requests at the run's rate, the same seed for all; the first tenth of the requests warm the twin up and the last tenth drain it, neither judged",
	}
	if r.judged {
		out = append(out, "goodput is the highest rate at which every SLO holds and the deployment keeps up, over at least a minute of arrivals (docs/plan.md)")
	} else {
		out = append(out, "no --slo: each prediction is the P99 of the metric a finding is about; without a threshold there is no goodput")
	}
	if r.prof != nil {
		out = append(out, fmt.Sprintf("steps are timed by the calibrated profile (%s on %d × %s); predictions outside its fitted range (batch %d–%d, input %d–%d, output %d–%d tokens) are extrapolations",
			r.prof.Model, r.prof.TP, r.prof.GPU, r.prof.Range.BatchMin, r.prof.Range.BatchMax, r.prof.Range.InputMin, r.prof.Range.InputMax, r.prof.Range.OutputMin, r.prof.Range.OutputMax))
	} else {
		out = append(out, "the twin is the engine that produced the run (the performance model's default constants for its GPU, not calibrated on a real server)")
	}
	return append(out, r.b.Notes...)
}

// measured is the run's own value of each objective, in milliseconds.
func (r *runner) measured(rep *report.Report) []float64 {
	out := make([]float64, len(r.slos))
	for i, s := range r.slos {
		out[i] = math.NaN()
		if r.judged {
			for _, v := range rep.SLOs {
				if v.SLO == s.String() && v.Status != report.StatusNoData {
					out[i] = v.ValueMS
				}
			}
			continue
		}
		for _, m := range rep.Metrics {
			if m.Metric == string(s.Metric) {
				out[i] = m.P99
			}
		}
	}
	return out
}

// describe names the deployment in one line.
func describe(d capacity.Deployment, c *state) string {
	var b strings.Builder
	seqs, budget := "max_num_seqs", "max_num_batched_tokens"
	if llamaCpp(d) {
		seqs, budget = "slots (-np)", "batch (-b)"
	}
	fmt.Fprintf(&b, "%d × %s TP%d %s, kv %s, %s %d, %s %d", d.Replicas, c.pc.GPU.Name, c.pc.TP,
		c.pc.WeightDType, c.pc.KVDType, seqs, c.ec.MaxNumSeqs, budget, c.ec.MaxNumBatchedTokens)
	if c.ec.DisableChunkedPrefill {
		b.WriteString(", no chunked prefill")
	}
	if c.ec.EnablePrefixCaching {
		b.WriteString(", prefix caching")
	}
	if k := c.ec.Speculative.K; k > 0 {
		fmt.Fprintf(&b, ", speculative k=%d α=%g", k, c.ec.Speculative.Alpha)
	}
	if c.ec.MaxWaiting > 0 {
		fmt.Fprintf(&b, ", max_waiting %d", c.ec.MaxWaiting)
	}
	if d.MaxMaxTokens > 0 {
		fmt.Fprintf(&b, ", max_tokens ≤ %d", d.MaxMaxTokens)
	}
	if d.Replicas > 1 {
		b.WriteString(", " + balancer(d))
	}
	b.WriteString(pdName(d))
	return fmt.Sprintf("%s (%s)", b.String(), c.pc.Model.Name)
}

// percentile is the nearest-rank p-th percentile of xs (stats.Percentile).
func percentile(xs []int, p float64) int {
	s := slices.Clone(xs)
	slices.Sort(s)
	return stats.Percentile(s, p)
}

func span(xs []int) [2]int {
	if len(xs) == 0 {
		return [2]int{}
	}
	return [2]int{slices.Min(xs), slices.Max(xs)}
}

// fidelity compares the twin's baseline with the measured run, objective
// by objective, against the twin's stated error there, and says why its
// remedies are unreliable when it misses by more (empty when it does not).
func (r *runner) fidelity(measured []float64, twin []*float64) (miss []*float64, stated []float64, why string) {
	miss = make([]*float64, len(r.slos))
	stated = make([]float64, len(r.slos))
	var worst []string
	for i, s := range r.slos {
		stated[i] = r.statedError(s)
		if i >= len(measured) || i >= len(twin) || twin[i] == nil || !(measured[i] > 0) {
			continue
		}
		m := math.Abs(*twin[i]-measured[i]) / measured[i]
		miss[i] = &m
		if m > stated[i] {
			worst = append(worst, fmt.Sprintf("%s %s measured %.0f ms, twin %.0f ms (off by %.0f %%, its stated error %.0f %%)",
				s.Metric, percentileName(s.Percentile), measured[i], *twin[i], 100*m, 100*stated[i]))
		}
	}
	if len(worst) == 0 {
		return miss, stated, ""
	}
	return miss, stated, "the twin's baseline misses the run by more than its stated error — " + strings.Join(worst, "; ") +
		": something the twin does not model shaped this run (server stalls, another tenant, the network, a different engine), so what it predicts for a lever is not what the server would do; remedies are listed unranked"
}

// statedError is the twin's own stated relative error at an objective
// (capacity.StatedError).
func (r *runner) statedError(s latency.SLO) float64 {
	return capacity.StatedError(r.prof, s.Metric, s.Percentile)
}

// percentileName is "P99" for 99, "max" for 100.
func percentileName(p float64) string {
	if p >= 100 {
		return "max"
	}
	return "P" + strconv.FormatFloat(p, 'f', -1, 64)
}
