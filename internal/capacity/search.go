package capacity

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// Objective is what a plan asks for.
type Objective struct {
	// SLOs must all hold; the first one's metric is the plan's latency.
	SLOs []latency.SLO
	// TargetRate, when positive, asks for the cheapest deployment that
	// meets the SLOs at this rate (requests per second). Zero maximises
	// throughput: the deployment with the highest goodput.
	TargetRate float64
	// Budget caps a throughput plan's cost in dollars per hour (0: none).
	Budget float64
}

// SearchOptions tune a plan.
type SearchOptions struct {
	Options
	// Parallel is how many simulations run at once (0: GOMAXPROCS).
	Parallel int
	// Tolerance is the goodput search's (0: DefaultTolerance).
	Tolerance float64
	// Margin multiplies the roofline's rate bound before it prunes (0:
	// DefaultMargin), so that a bound a little too tight prunes nothing
	// that could serve the target.
	Margin float64
	// SampleRequests is how many of the workload's requests the bounds
	// are computed over (0: 2,000).
	SampleRequests int
}

// DefaultMargin is the slack on the roofline's rate bound when pruning.
const DefaultMargin = 1.25

// wave is how many candidates are weighed together before the ones after
// them are checked for dominance: a fixed number, so that what is pruned
// does not depend on the number of cores.
const wave = 8

// Status says how far a candidate went.
type Status string

// Candidate statuses.
const (
	NoFit         Status = "does not fit"     // the engine cannot run (weights, heads, memory)
	Duplicate     Status = "duplicate"        // simulates as an earlier candidate (Of)
	PrunedLatency Status = "latency bound"    // an SLO's roofline lower bound is above its threshold
	PrunedRate    Status = "rate bound"       // the roofline's rate bound is below the target
	OverBudget    Status = "over budget"      // costs more than Objective.Budget
	Misses        Status = "misses the SLOs"  // simulated at the target rate, an SLO failed
	Meets         Status = "meets the SLOs"   // simulated at the target rate, every SLO held; goodput known
	Dominated     Status = "dominated"        // meets, but a cheaper candidate is at least as fast and serves more than it could
	NoGoodput     Status = "no rate meets"    // throughput plan: no rate down to the search's floor meets the SLOs
	Searched      Status = "goodput searched" // throughput plan: goodput known
)

// Candidate is one deployment of the space and what the plan found of it.
type Candidate struct {
	// ID is its place in the enumeration (1-based).
	ID int
	Deployment
	// Name describes it in one line.
	Name string
	// GPU is its catalog name, TP the GPUs per replica, GPUs in all.
	GPU      string
	TP, GPUs int
	// USDPerHour is GPUs × the GPU's price per GPU-hour.
	USDPerHour float64
	Bound      Bound
	Status     Status
	// Reason says why it stopped where it did (the bound, the error).
	Reason string
	// Of is the candidate a duplicate shares its results with.
	Of *Candidate
	// Check is the simulation at the target rate (target plans).
	Check *Point
	// Goodput is the goodput search's result, when one ran.
	Goodput *Goodput
	// USDPer1MOut is USDPerHour over the output tokens served at goodput
	// (docs/metrics.md, "Cost"); +Inf when no rate meets.
	USDPer1MOut float64
	// Outside lists where its prediction (at the target, or at goodput)
	// lies outside what its engine constants were fitted on
	// (Deployment.OutsideEnvelope): shown, and never the answer while a
	// candidate inside meets.
	Outside []string
	// Interval80 is the twin's 80 % interval at that point and Unfitted
	// the constants' own flag, shared by every candidate of the source
	// (Deployment.Interval80); zero before the plan is ranked.
	Interval80 engine.Interval
	Unfitted   string

	r   *resolved
	key string
}

// Latency is the candidate's value of the plan's first SLO: at the target
// rate for a target plan, at its goodput for a throughput plan; Unbounded
// when unknown.
func (c *Candidate) Latency(target bool) time.Duration {
	var p *Point
	switch {
	case target:
		p = c.Check
	case c.Goodput != nil:
		p = c.Goodput.At
	}
	if p == nil || len(p.Values) == 0 {
		return Unbounded
	}
	return p.Values[0]
}

// GoodputRate is the candidate's goodput in requests per second (0 when
// unknown or none).
func (c *Candidate) GoodputRate() float64 {
	if c.Goodput == nil {
		return 0
	}
	return c.Goodput.Rate
}

// Plan is a search's outcome.
type Plan struct {
	// Model is the model planned for: its catalog name, or the
	// config.json's path as given.
	Model     string
	Workload  Workload
	Objective Objective
	// Prices is the price table's date and files.
	PricesDate  string
	PricesFiles []string
	Candidates  []*Candidate
	// Best is the answer: the cheapest candidate meeting the SLOs at the
	// target rate, or the one of highest goodput (within the budget); nil
	// when none does.
	Best *Candidate
	// Front is the Pareto front of cost, latency and goodput among the
	// candidates whose goodput is known, cheapest first.
	Front []*Candidate
	// Closest is, when no candidate meets the SLOs, the one that misses
	// them by the least (Miss at the target; its Goodput, if any).
	Closest *Candidate
	// Simulations counts every simulation the plan ran.
	Simulations int
	// PD answers "aggregated or disaggregated, and which ratio" when the
	// space held more than one pool split; nil otherwise.
	PD *PDAnswer
}

// Count counts the candidates of a status.
func (p *Plan) Count(s Status) int {
	n := 0
	for _, c := range p.Candidates {
		if c.Status == s {
			n++
		}
	}
	return n
}

// ErrNoneMeets is returned with the plan when no candidate meets the SLOs
// (the plan's Closest says which came nearest).
var ErrNoneMeets = errors.New("no configuration meets the SLOs")

// Search weighs every deployment of the space around base against the
// workload: roofline bounds first (pruning what cannot meet the objective),
// then simulations, in parallel, of what is left: at the target rate, and
// a goodput search for the candidates that meet it and are not dominated
// by a cheaper one. It returns the plan, and ErrNoneMeets with it when no
// candidate meets the SLOs.
func Search(ctx context.Context, base Deployment, space Space, w Workload, obj Objective, prices *perfmodel.Prices, o SearchOptions) (*Plan, error) {
	if len(obj.SLOs) == 0 {
		return nil, field.Errorf("slo", "a plan needs at least one SLO, as in ttft:p99<=1s")
	}
	if obj.TargetRate < 0 || math.IsNaN(obj.TargetRate) || math.IsInf(obj.TargetRate, 0) {
		return nil, field.Invalid("rate", obj.TargetRate, "must be a positive number of requests per second")
	}
	if err := field.NonNegative("budget", obj.Budget); err != nil {
		return nil, err
	}
	// The settings every candidate shares are checked once, here: a bad
	// one is the user's error, not a candidate that fails to meet the SLOs.
	if base.Replicas < 1 {
		return nil, field.Invalid("replicas", base.Replicas, "must be at least 1")
	}
	if err := base.Engine.Validate(); err != nil {
		return nil, err
	}
	if base.Disaggregated() || slices.ContainsFunc(space.PrefillReplicas, func(n int) bool { return n > 0 }) {
		if _, err := base.link(); err != nil {
			return nil, err
		}
	}
	if o.Parallel <= 0 {
		o.Parallel = runtime.GOMAXPROCS(0)
	}
	if o.Margin <= 0 {
		o.Margin = DefaultMargin
	}
	if o.SampleRequests <= 0 {
		o.SampleRequests = 2000
	}
	if prices == nil {
		prices = perfmodel.BuiltinPrices()
	}
	if base.Engine.Profile != "" {
		if _, err := perfmodel.LoadProfile(base.Engine.Profile); err != nil {
			return nil, field.Wrap("profile", err)
		}
	}
	pl := &Plan{Model: base.Engine.Model, Workload: w, Objective: obj, PricesDate: prices.Date, PricesFiles: prices.Files}
	if m, err := perfmodel.ResolveModel(base.Engine.Model); err == nil && (pl.Model == "" || m.Name == pl.Model) {
		pl.Model = m.Name
	}
	lens := w.sampleLengths(min(o.SampleRequests, max(w.Load.Requests+w.Load.WarmupRequests, 1)))
	if err := pl.enumerate(base, space, lens, prices, o); err != nil {
		return nil, err
	}
	// Without --vary replicas, a target-rate plan chooses the counts.
	if err := pl.preflight(w, o, len(space.Replicas) == 0 && obj.TargetRate > 0); err != nil {
		return nil, err
	}
	var err error
	if obj.TargetRate > 0 {
		err = pl.searchTarget(ctx, w, o)
	} else {
		err = pl.searchThroughput(ctx, w, o)
	}
	if err != nil {
		return nil, err
	}
	pl.finish()
	if pl.Best == nil {
		return pl, ErrNoneMeets
	}
	return pl, nil
}

// enumerate builds the candidates, resolves them, prices them, bounds
// them and marks duplicates and what the bounds prune.
func (pl *Plan) enumerate(base Deployment, space Space, lens lengths, prices *perfmodel.Prices, o SearchOptions) error {
	obj := pl.Objective
	maxOut := lens.maxOut()
	cacheable := slices.ContainsFunc(lens.cacheable, func(n int) bool { return n > 0 })
	seen := map[string]*Candidate{}
	for _, eng := range space.engines(base) {
		r1, err := Deployment{Engine: eng.Engine, Replicas: 1}.resolve()
		var fe *field.Error
		if err != nil && eng.Engine.Profile != "" && errors.As(err, &fe) && fe.Field == "profile" {
			// The profile (loaded above) is for another GPU, TP or
			// precision: this engine runs on the default constants.
			eng.Engine.Profile = ""
			r1, err = Deployment{Engine: eng.Engine, Replicas: 1}.resolve()
		}
		if err != nil {
			if fatal(err) {
				return err
			}
			pl.add(&Candidate{Deployment: eng, Name: describeUnresolved(eng), GPU: eng.Engine.GPU, Status: NoFit, Reason: err.Error()})
			continue
		}
		price, ok := prices.Lookup(r1.gpu)
		if !ok {
			return field.Invalid("gpu", r1.gpu, "has no price: add one with --prices FILE (docs/plan.md)")
		}
		replicas := replicaCounts(space, base, r1, lens, obj, o.Margin)
		bounds := map[int]Bound{} // by cap
		for _, d := range space.around(eng, replicas) {
			r := *r1
			r.Deployment = d
			if r.Balancer == "" {
				r.Balancer = r1.Deployment.Balancer
			}
			r.Replicas, r.PrefillReplicas, r.gpus = d.Replicas, d.PrefillReplicas, d.gpusAt(r1.tp)
			if err := r.withPrefill(); err != nil {
				if fatal(err) {
					return err
				}
				pl.add(&Candidate{Deployment: d, Name: describeUnresolved(d), GPU: r.gpu, Status: NoFit, Reason: err.Error()})
				continue
			}
			usd, err := poolsPrice(&r, price, prices)
			if err != nil {
				return err
			}
			c := &Candidate{Deployment: r.Deployment, Name: r.Name(), GPU: r.gpu, TP: r.tp, GPUs: r.gpus,
				USDPerHour: usd, r: &r, key: r.key(maxOut, cacheable), USDPer1MOut: math.Inf(1)}
			b, ok := bounds[d.MaxMaxTokens]
			if !ok {
				one := r
				one.Replicas, one.PrefillReplicas, one.pre = 1, 0, nil
				b = one.bound(lens, obj.SLOs)
				bounds[d.MaxMaxTokens] = b
			}
			if r.pre != nil {
				b = b.withPrefill(r.pre.bound(lens.capped(d.MaxMaxTokens), obj.SLOs))
			}
			c.Bound = b.at(d)
			r.e2e = max(1, b.UnloadedE2E)
			pl.add(c)
			if first, dup := seen[c.key]; dup {
				c.Status, c.Of = Duplicate, first
				c.Reason = fmt.Sprintf("simulates as #%d", first.ID)
				continue
			}
			seen[c.key] = c
			pl.prune(c, o.Margin)
		}
	}
	return nil
}

// replicaCounts are the replica counts to try for an engine resolved as
// r1: the space's, else the base's, or, for a target rate, AutoReplicas
// counts from the least its rate bound allows.
func replicaCounts(space Space, base Deployment, r1 *resolved, lens lengths, obj Objective, margin float64) []int {
	if len(space.Replicas) > 0 {
		return space.Replicas
	}
	if obj.TargetRate <= 0 {
		return []int{max(base.Replicas, 1)}
	}
	b1 := r1.bound(lens.capped(minCap(space, base)), obj.SLOs)
	least := max(1, int(math.Ceil(obj.TargetRate/(b1.MaxRate*margin))))
	replicas := make([]int, 0, AutoReplicas)
	for n := least; n < least+AutoReplicas; n++ {
		replicas = append(replicas, n)
	}
	return replicas
}

func (pl *Plan) add(c *Candidate) {
	c.ID = len(pl.Candidates) + 1
	pl.Candidates = append(pl.Candidates, c)
}

// minCap is the smallest max_tokens cap the space tries (0: none), which
// gives the highest rate bound, for the automatic replica counts.
func minCap(s Space, base Deployment) int {
	caps := s.MaxMaxTokens
	if len(caps) == 0 {
		return base.MaxMaxTokens
	}
	m := 0
	for _, c := range caps {
		if c > 0 && (m == 0 || c < m) {
			m = c
		}
	}
	if slices.Contains(caps, 0) && m == 0 {
		return 0
	}
	return m
}

// prune marks a candidate the bounds rule out.
func (pl *Plan) prune(c *Candidate, margin float64) {
	obj := pl.Objective
	for i, s := range obj.SLOs {
		if v := c.Bound.MinValues[i]; v > s.Max {
			c.Status = PrunedLatency
			c.Reason = fmt.Sprintf("%s cannot hold: its unloaded value is already %s", s, fmtDur(v))
			return
		}
	}
	if obj.TargetRate > 0 && c.Bound.MaxRate*margin < obj.TargetRate {
		c.Status = PrunedRate
		c.Reason = fmt.Sprintf("the roofline allows at most %.3g req/s, below the target %g req/s", c.Bound.MaxRate, obj.TargetRate)
		return
	}
	if obj.Budget > 0 && c.USDPerHour > obj.Budget {
		c.Status = OverBudget
		c.Reason = fmt.Sprintf("$%.2f/h is over the budget of $%.2f/h", c.USDPerHour, obj.Budget)
	}
}

// fatal tells errors of the user's input (an unknown model, GPU or
// precision) from a configuration that cannot run.
func fatal(err error) bool {
	var nf *perfmodel.NoFitError
	if errors.As(err, &nf) {
		return false
	}
	var fe *field.Error
	if errors.As(err, &fe) {
		switch fe.Field {
		case "gpu_memory_utilization", "tensor_parallel_size", "max_model_len", "kv_cache_dtype", "speculative_k":
			return false
		}
		return true
	}
	return false
}

func describeUnresolved(d Deployment) string {
	tp := "TP auto"
	if d.Engine.TensorParallelSize > 0 {
		tp = fmt.Sprintf("TP%d", d.Engine.TensorParallelSize)
	}
	return fmt.Sprintf("%s %s %s", d.Engine.GPU, tp, d.Engine.DType)
}

// open lists the candidates still in the running, cheapest first.
func (pl *Plan) open(st Status) []*Candidate {
	var out []*Candidate
	for _, c := range pl.Candidates {
		if c.Status == st {
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, func(a, b *Candidate) int { return cmp.Compare(a.USDPerHour, b.USDPerHour) })
	return out
}

// parallel runs f on every candidate, o.Parallel at a time.
func parallel(ctx context.Context, cs []*Candidate, n int, f func(*Candidate) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(n)
	for _, c := range cs {
		g.Go(func() error {
			if err := ctx.Err(); err != nil {
				return err
			}
			return f(c)
		})
	}
	return g.Wait()
}

// searchTarget simulates every unpruned candidate at the target rate, then
// searches the goodput of those that meet it and are not dominated.
func (pl *Plan) searchTarget(ctx context.Context, w Workload, o SearchOptions) error {
	obj := pl.Objective
	cs := pl.open("")
	check := o.Options
	check.StopEarly = false // the check's values say by how much a candidate misses
	err := parallel(ctx, cs, o.Parallel, func(c *Candidate) error {
		p, err := c.r.evaluate(w, obj.SLOs, obj.TargetRate, check)
		if err != nil {
			return fmt.Errorf("%s: %w", c.Name, err)
		}
		c.Check = &p
		if p.Meets {
			c.Status = Meets
		} else {
			c.Status = Misses
			c.Reason = pl.missReason(p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	pl.Simulations += len(cs)
	search := o.Options
	search.StopEarly = true
	meeting := pl.open(Meets)
	var done []*Candidate
	for i := 0; i < len(meeting); i += wave {
		var batch []*Candidate
		for _, c := range meeting[i:min(i+wave, len(meeting))] {
			if d := dominatedBy(c, done, true, o.Margin); d != nil {
				c.Status = Dominated
				c.Reason = fmt.Sprintf("#%d costs no more, is at least as fast at the target and serves %.3g req/s, more than this one's roofline bound", d.ID, d.GoodputRate())
				continue
			}
			batch = append(batch, c)
		}
		err := parallel(ctx, batch, o.Parallel, func(c *Candidate) error {
			g, err := c.r.goodput(w, obj.SLOs, hint{lo: obj.TargetRate, loPoint: c.Check, tol: o.Tolerance,
				ceiling: c.Bound.MaxRate * o.Margin}, search)
			c.Goodput = &g
			return err
		})
		if err != nil {
			return err
		}
		for _, c := range batch {
			pl.Simulations += c.Goodput.Simulations
		}
		done = append(done, batch...)
	}
	if len(meeting) > 0 {
		return nil
	}
	// None meets the target: say up to what rate the closest one does.
	c := pl.closest()
	if c == nil || c.Check == nil {
		return nil
	}
	g, err := c.r.goodput(w, obj.SLOs, hint{hi: obj.TargetRate, hiPoint: c.Check, guess: obj.TargetRate / 2, tol: o.Tolerance}, search)
	if err != nil {
		return err
	}
	c.Goodput = &g
	pl.Simulations += g.Simulations
	return nil
}

// searchThroughput searches the goodput of every unpruned candidate,
// cheapest first, skipping those a cheaper one already outserves.
func (pl *Plan) searchThroughput(ctx context.Context, w Workload, o SearchOptions) error {
	obj := pl.Objective
	search := o.Options
	search.StopEarly = true
	cs := pl.open("")
	var done []*Candidate
	for i := 0; i < len(cs); i += wave {
		var batch []*Candidate
		for _, c := range cs[i:min(i+wave, len(cs))] {
			if d := dominatedBy(c, done, false, o.Margin); d != nil {
				c.Status = Dominated
				c.Reason = fmt.Sprintf("#%d costs no more and serves %.3g req/s, more than this one's roofline bound", d.ID, d.GoodputRate())
				continue
			}
			batch = append(batch, c)
		}
		err := parallel(ctx, batch, o.Parallel, func(c *Candidate) error {
			guess := c.Bound.MaxRate / 2
			if math.IsInf(guess, 1) || !(guess > 0) {
				guess = max(w.Rate, 1)
			}
			g, err := c.r.goodput(w, obj.SLOs, hint{guess: guess, tol: o.Tolerance}, search)
			c.Goodput = &g
			if err != nil {
				return err
			}
			c.Status = Searched
			if g.Rate == 0 {
				c.Status = NoGoodput
				if g.Above != nil {
					// Say by how much, at the lowest rate tried.
					p, err := c.r.evaluate(w, obj.SLOs, g.Above.Rate, o.Options)
					if err != nil {
						return err
					}
					c.Goodput.Simulations++
					c.Goodput.Above = &p
					c.Reason = pl.missReason(p)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, c := range batch {
			pl.Simulations += c.Goodput.Simulations
		}
		done = append(done, batch...)
	}
	return nil
}

// dominatedBy returns a searched candidate that makes c not worth a
// goodput search: it costs no more, its goodput is above c's roofline rate
// bound (with the margin), and its latency is no higher than c's (at the
// target, for a target plan; c's lower bound otherwise).
func dominatedBy(c *Candidate, done []*Candidate, target bool, margin float64) *Candidate {
	lat := c.Latency(target)
	if !target {
		lat = c.Bound.MinValues[0]
	}
	for _, d := range done {
		if d.Goodput == nil || d.USDPerHour > c.USDPerHour || d.GoodputRate() < c.Bound.MaxRate*margin {
			continue
		}
		if d.Latency(target) <= lat {
			return d
		}
	}
	return nil
}

// poolsPrice is r's cost an hour, each pool at its GPU's price: the
// decode pool (or every replica) at price, a prefill pool on another GPU
// at that GPU's (each pool's GPUs at its own TP).
func poolsPrice(r *resolved, price perfmodel.Price, prices *perfmodel.Prices) (float64, error) {
	if r.pre == nil || r.pre.gpu == r.gpu {
		return price.PerHour(r.gpus), nil
	}
	pp, ok := prices.Lookup(r.pre.gpu)
	if !ok {
		return 0, field.Invalid("prefill_gpu", r.pre.gpu, "has no price: add one with --prices FILE (docs/plan.md)")
	}
	return price.PerHour(r.tp*r.Replicas) + pp.PerHour(r.pre.tp*r.PrefillReplicas), nil
}
