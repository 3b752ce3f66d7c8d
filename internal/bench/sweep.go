package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// Sweep runs one phase per point: over a list of rates or concurrencies,
// or automatically. With Auto and no SLOs it finds saturation (doubling
// until throughput stops keeping up) and spreads Points below it; with
// Auto and SLOs it searches the capacity: the highest rate whose SLOs hold
// (doubling to bracket it, then bisection to Tolerance, then Repeat runs
// of the answer).
type Sweep struct {
	// Kind is "rate" or "concurrency".
	Kind   string
	Values []float64
	Auto   bool
	// Start is the first rate or concurrency of an automatic sweep.
	Start float64
	// Points below saturation (auto, default 5); Tolerance of the capacity
	// search, relative (default 0.05); Repeat runs of its answer (default 2);
	// MaxPoints bounds the probes (default 20).
	Points    int
	Tolerance float64
	Repeat    int
	MaxPoints int
	// MinSpan is the least time a rate point sends for: its request count
	// is raised to rate × MinSpan (and its duration to MinSpan) when lower.
	// A point shorter than a few end-to-end latencies is a burst that an
	// engine with a large batch absorbs whatever its sustained capacity,
	// so without it a capacity search overstates capacity. 0: no minimum.
	MinSpan time.Duration
}

// ParseSweep reads --sweep: "auto", or a comma-separated list of values.
// kind is "rate" or "concurrency".
func ParseSweep(spec, kind string) (*Sweep, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, nil
	}
	s := &Sweep{Kind: kind}
	if strings.EqualFold(spec, "auto") {
		s.Auto = true
		return s, nil
	}
	for _, f := range strings.Split(spec, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("sweep %q: want auto or a list of positive numbers (%ss)", spec, kind)
		}
		if kind == "concurrency" && v != math.Trunc(v) {
			return nil, fmt.Errorf("sweep %q: concurrencies are whole numbers", spec)
		}
		s.Values = append(s.Values, v)
	}
	return s, nil
}

// Validate checks the sweep.
func (s *Sweep) Validate(slos []latency.SLO) error {
	if s.Kind != "rate" && s.Kind != "concurrency" {
		return fmt.Errorf("sweep kind %q: want rate or concurrency", s.Kind)
	}
	if !s.Auto && len(s.Values) == 0 {
		return errors.New("sweep: no points")
	}
	if s.Auto && len(slos) > 0 && s.Kind != "rate" {
		return errors.New("capacity search (--sweep auto with --slo) sweeps the rate; give --rate, not only --concurrency")
	}
	return nil
}

// String describes the sweep in words.
func (s *Sweep) String() string {
	switch {
	case s.Auto:
		return "automatic " + s.Kind + " sweep"
	default:
		vs := make([]string, len(s.Values))
		for i, v := range s.Values {
			vs[i] = strconv.FormatFloat(v, 'g', -1, 64)
		}
		return s.Kind + " sweep over " + strings.Join(vs, ", ")
	}
}

func (s *Sweep) defaults() {
	if s.Points <= 0 {
		s.Points = 5
	}
	if s.Tolerance <= 0 {
		s.Tolerance = 0.05
	}
	if s.Repeat <= 0 {
		s.Repeat = 2
	}
	if s.MaxPoints <= 0 {
		s.MaxPoints = 20
	}
}

// SweepPoint is one probe of a sweep.
type SweepPoint struct {
	Phase         string  `json:"phase"`
	Rate          float64 `json:"rate,omitempty"`
	Concurrency   int     `json:"concurrency,omitempty"`
	ThroughputRPS float64 `json:"throughput_rps"`
	KeepsUp       bool    `json:"keeps_up"`
	SLOsHold      *bool   `json:"slos_hold,omitempty"`
	// BeforeCell says what was done to the server before the point
	// (--between-cells); BeforeCellWarning what of it failed.
	BeforeCell        string `json:"before_cell,omitempty"`
	BeforeCellWarning string `json:"before_cell_warning,omitempty"`
}

// SweepOutcome is what a sweep found.
type SweepOutcome struct {
	Kind   string       `json:"kind"`
	Points []SweepPoint `json:"points"`
	// Saturation is the highest rate or concurrency that kept up (auto).
	Saturation float64 `json:"saturation,omitempty"`
	// Capacity is the highest rate whose SLOs held (capacity search);
	// FailsAt the lowest rate seen failing.
	Capacity float64 `json:"capacity,omitempty"`
	FailsAt  float64 `json:"fails_at,omitempty"`
	// Line is the one-line answer.
	Line string `json:"line"`
}

func (o *SweepOutcome) points() []results.SweepPoint {
	var out []results.SweepPoint
	for _, p := range o.Points {
		out = append(out, results.SweepPoint{Phase: p.Phase, OfferedRate: p.Rate, Concurrency: p.Concurrency,
			BeforeCell: p.BeforeCell, BeforeCellWarning: p.BeforeCellWarning})
	}
	return out
}

func (o *SweepOutcome) mode() string {
	if o.Kind == "concurrency" {
		return "closed"
	}
	return "open"
}

// sweeper runs probes.
type sweeper struct {
	runner *Runner
	cfg    Config
	log    io.Writer
	phases *[]PhaseResult
	out    *SweepOutcome
	seen   map[string]int
	prep   *cellPrep // nil: nothing between cells
}

// probe runs one point and judges it: a rate point keeps up when answers
// come back at ≥ 95 % of the realized arrival rate (completion rate against
// scheduled rate) with ≤ 5 % failures; a concurrency point when anything
// succeeded (its saturation is judged by the caller); with SLOs, whether
// every SLO held over the point.
func (sw *sweeper) probe(ctx context.Context, v float64) (SweepPoint, error) {
	load, pt := sw.point(v)
	name := pt.Phase
	var pc *report.Collector
	if len(sw.cfg.SLOs) > 0 {
		pc = report.NewCollector(report.Options{SLOs: sw.cfg.SLOs, Resamples: 200})
		orig := sw.runner.Emit
		sw.runner.Emit = func(r *latency.Record) { orig(r); pc.Add(r) }
		defer func() { sw.runner.Emit = orig }()
	}
	if sw.prep != nil {
		pt.BeforeCell, pt.BeforeCellWarning = sw.prep.before(ctx, name)
		if pt.BeforeCellWarning != "" {
			fmt.Fprintf(sw.log, "bench: warning: before %s: %s\n", name, pt.BeforeCellWarning)
		}
	}
	res, err := sw.runner.Run(ctx, name, load)
	*sw.phases = append(*sw.phases, res)
	if err != nil {
		return pt, err
	}
	pt.ThroughputRPS = res.ThroughputRPS
	if sw.out.Kind == "rate" {
		// Answers come back as fast as requests went out (the realized
		// schedule, not the nominal rate: Poisson points are noisy), and no
		// more than 5 % failed.
		sched := res.ScheduledRPS
		if sched == 0 {
			sched = v
		}
		pt.KeepsUp = res.CompletionRPS >= 0.95*sched && float64(res.Succeeded) >= 0.95*float64(res.Sent-res.Warmup)
	} else {
		pt.KeepsUp = res.Succeeded > 0
	}
	if pc != nil {
		hold := pt.KeepsUp && !slosFailed(pc.Report(), sw.cfg.SLOs)
		pt.SLOsHold = &hold
	}
	sw.out.Points = append(sw.out.Points, pt)
	verdict := ""
	if pt.SLOsHold != nil {
		verdict = map[bool]string{true: ", SLOs hold", false: ", SLOs fail"}[*pt.SLOsHold]
	}
	fmt.Fprintf(sw.log, "bench: %s: completion %.2f req/s of %.2f scheduled%s\n", name, res.CompletionRPS, res.ScheduledRPS, verdict)
	return pt, ctx.Err()
}

// point is the load of the point at v and its name (repeats of a point
// are numbered: "rate=4#2").
func (sw *sweeper) point(v float64) (workload.Load, SweepPoint) {
	load := sw.cfg.Load
	pt := SweepPoint{}
	name := ""
	if sw.out.Kind == "rate" {
		load.Rate, pt.Rate = v, v
		name = "rate=" + strconv.FormatFloat(v, 'g', 4, 64)
		if span := sw.cfg.Sweep.MinSpan; span > 0 {
			if load.Duration > 0 && load.Duration < span {
				load.Duration = span
			}
			if n := int(math.Ceil(v * span.Seconds())); load.Requests > 0 && load.Requests < n {
				load.Requests = n
			}
		}
	} else {
		load.Rate, load.Arrivals = 0, nil
		load.Concurrency, pt.Concurrency = int(v), int(v)
		name = "concurrency=" + strconv.Itoa(int(v))
	}
	if n := sw.seen[name]; n > 0 {
		name += fmt.Sprintf("#%d", n+1)
	}
	sw.seen[strings.SplitN(name, "#", 2)[0]]++
	pt.Phase = name
	return load, pt
}

// runSweep runs cfg.Sweep's points through r, appending each phase's
// result to phases.
func runSweep(ctx context.Context, r *Runner, cfg Config, prep *cellPrep, log io.Writer, phases *[]PhaseResult) (*SweepOutcome, error) {
	s := *cfg.Sweep
	s.defaults()
	sw := &sweeper{runner: r, cfg: cfg, log: log, phases: phases, out: &SweepOutcome{Kind: s.Kind}, seen: map[string]int{}, prep: prep}
	switch {
	case !s.Auto:
		for _, v := range s.Values {
			if _, err := sw.probe(ctx, v); err != nil {
				return sw.out, err
			}
		}
		sw.out.Line = fmt.Sprintf("sweep     %d points over %s", len(s.Values), s.Kind)
		return sw.out, nil
	case len(cfg.SLOs) > 0:
		return sw.out, sw.capacity(ctx, s)
	default:
		return sw.out, sw.saturation(ctx, s)
	}
}

func (sw *sweeper) start(s Sweep) float64 {
	if s.Start > 0 {
		return s.Start
	}
	if s.Kind == "rate" && sw.cfg.Load.Rate > 0 {
		return sw.cfg.Load.Rate
	}
	if s.Kind == "concurrency" && sw.cfg.Load.Concurrency > 0 {
		return float64(sw.cfg.Load.Concurrency)
	}
	return 1
}

// saturation doubles the rate (concurrency) until throughput stops keeping
// up (for concurrency: until doubling adds under 10 % throughput), then
// spreads Points evenly up to the last point that kept up.
func (sw *sweeper) saturation(ctx context.Context, s Sweep) error {
	v := sw.start(s)
	var sat float64
	prevTP := 0.0
	for range s.MaxPoints - s.Points {
		pt, err := sw.probe(ctx, v)
		if err != nil {
			return err
		}
		if s.Kind == "rate" {
			if !pt.KeepsUp {
				break
			}
		} else if prevTP > 0 && pt.ThroughputRPS < 1.1*prevTP {
			break
		}
		sat, prevTP = v, pt.ThroughputRPS
		v *= 2
	}
	if sat == 0 {
		sw.out.Line = fmt.Sprintf("saturation: even the first point (%s %g) did not keep up", s.Kind, v)
		return nil
	}
	sw.out.Saturation = sat
	for i := 1; i <= s.Points; i++ {
		x := sat * float64(i) / float64(s.Points)
		if s.Kind == "concurrency" {
			x = math.Max(1, math.Round(x))
		}
		if _, err := sw.probe(ctx, x); err != nil {
			return err
		}
	}
	unit := "req/s"
	if s.Kind == "concurrency" {
		unit = "concurrent requests"
	}
	sw.out.Line = fmt.Sprintf("saturation: throughput keeps up to %g %s; %d points spread below it", sat, unit, s.Points)
	return nil
}

// capacity brackets the highest rate whose SLOs hold, bisects to the
// tolerance, and repeats the answer; a failing repeat moves it down.
func (sw *sweeper) capacity(ctx context.Context, s Sweep) error {
	c := &capacitySearch{sw: sw, s: s}
	if err := c.bracket(ctx, sw.start(s)); err != nil {
		return err
	}
	if err := c.bisect(ctx); err != nil {
		return err
	}
	if err := c.repeat(ctx); err != nil {
		return err
	}
	sw.out.Capacity, sw.out.FailsAt = c.lo, c.hi
	sw.out.Line = c.line()
	return nil
}

// capacitySearch is a capacity search's state: lo is the highest rate seen
// holding the SLOs, hi the lowest seen failing (0: none yet), n the probes.
type capacitySearch struct {
	sw     *sweeper
	s      Sweep
	lo, hi float64
	n      int
}

// holds probes rate x and reports whether its SLOs held.
func (c *capacitySearch) holds(ctx context.Context, x float64) (bool, error) {
	c.n++
	pt, err := c.sw.probe(ctx, x)
	if err != nil {
		return false, err
	}
	return *pt.SLOsHold, nil
}

// bracket doubles from v while the SLOs hold, or halves while they fail.
func (c *capacitySearch) bracket(ctx context.Context, v float64) error {
	ok, err := c.holds(ctx, v)
	if err != nil {
		return err
	}
	if ok {
		c.lo = v
		for c.n < c.s.MaxPoints {
			v *= 2
			if ok, err = c.holds(ctx, v); err != nil {
				return err
			}
			if !ok {
				c.hi = v
				return nil
			}
			c.lo = v
		}
		return nil
	}
	c.hi = v
	for c.n < c.s.MaxPoints && v > 1e-3 {
		v /= 2
		if ok, err = c.holds(ctx, v); err != nil {
			return err
		}
		if ok {
			c.lo = v
			return nil
		}
		c.hi = v
	}
	return nil
}

// bisect narrows the bracket to the tolerance.
func (c *capacitySearch) bisect(ctx context.Context) error {
	for c.hi > 0 && c.lo > 0 && (c.hi-c.lo)/c.hi > c.s.Tolerance && c.n < c.s.MaxPoints {
		mid := (c.lo + c.hi) / 2
		ok, err := c.holds(ctx, mid)
		if err != nil {
			return err
		}
		if ok {
			c.lo = mid
		} else {
			c.hi = mid
		}
	}
	return nil
}

// repeat runs the answer again, since the edge is noisy: a failing repeat
// moves the answer down by the tolerance and starts the repeats over.
func (c *capacitySearch) repeat(ctx context.Context) error {
	for r := 0; c.lo > 0 && r < c.s.Repeat && c.n < c.s.MaxPoints; r++ {
		ok, err := c.holds(ctx, c.lo)
		if err != nil {
			return err
		}
		if !ok {
			c.hi, c.lo, r = c.lo, c.lo*(1-c.s.Tolerance), -1
		}
	}
	return nil
}

// line is the search's one-line answer.
func (c *capacitySearch) line() string {
	slos := make([]string, len(c.sw.cfg.SLOs))
	for i, x := range c.sw.cfg.SLOs {
		slos[i] = x.String()
	}
	objectives := strings.Join(slos, ",")
	switch {
	case c.lo == 0:
		return fmt.Sprintf("capacity: no rate tried meets %s (lowest tried %.3g req/s)", objectives, c.hi)
	case c.hi == 0:
		return fmt.Sprintf("capacity: at least %.3g req/s meets %s (no failing rate found in %d points)", c.lo, objectives, c.n)
	default:
		return fmt.Sprintf("capacity: %.3g req/s meets %s (fails at %.3g req/s; %d points, ±%.0f%%)",
			c.lo, objectives, c.hi, c.n, 100*c.s.Tolerance)
	}
}
