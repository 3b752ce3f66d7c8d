package verify

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/capacity"
	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/results"
)

// Twin is the first run as the twin runs it (whatif.TwinOf's baseline).
type Twin struct {
	Deployment capacity.Deployment
	Workload   capacity.Workload
	// Basis says what the twin is ("the embedded engine's settings",
	// "profile FILE"); Notes what it leaves out.
	Basis string
	Notes []string
	// Seed is the run's seed: the first draw's.
	Seed uint64
}

// Config is one verify.
type Config struct {
	Before, After Run
	// Twin is Before's twin; AfterWorkload the second run's workload as
	// the twin rebuilds it (nil when it cannot be), replayed when the
	// load itself changed.
	Twin          Twin
	AfterWorkload *capacity.Workload
	// AfterSeed is the second run's seed: the prediction's first draw
	// when the twin replays the second run's workload, so that it runs
	// the very requests and arrivals the second run sent (0: unknown).
	AfterSeed uint64
	// AfterPD is the second run's disaggregated serving as its twin was
	// rebuilt (its records' prefill hop, the gateway's pools, the link
	// nearest its transfers; PDOf): a P/D change its server evidence does
	// not show. Zero for an aggregated run or none known.
	AfterPD PD
	// Applied are --applied's changes, beside those the evidence shows.
	Applied []Change
	// SLOs judge goodput (none: no goodput row).
	SLOs []latency.SLO
	// Draws is how many seeds the twin is run over (at least 2).
	Draws int
	// Past are the ledger's verifies before this one: where it holds
	// MinLedger or more of the lever at a row, their errors there enter
	// its interval (LedgerError).
	Past []Entry
}

// Result is a verify's answer.
type Result struct {
	Before  string   `json:"before"`
	After   string   `json:"after"`
	Changes []Change `json:"changes"`
	// Lever names what was verified: the modelled levers, joined by "+".
	Lever string `json:"lever"`
	// Basis and Deployment say what the twin is; Draws how many seeds it
	// ran; Method how the intervals are made (docs/metrics.md).
	Basis      string   `json:"basis"`
	Deployment string   `json:"deployment"`
	Draws      int      `json:"draws"`
	Method     string   `json:"method"`
	Rows       []Row    `json:"rows"`
	Notes      []string `json:"notes,omitempty"`
	// MachineMoved is set where bench's own clock stalled for shares of
	// the two runs 5 points or more apart (the machine note): the
	// verdicts judge the machine's load as much as the twin.
	MachineMoved bool `json:"machine_moved,omitempty"`
	// Held counts the rows whose measurement lies in the 80 % interval.
	Held     int     `json:"held"`
	Judged   int     `json:"judged"`
	ElapsedS float64 `json:"elapsed_s"`
}

// Row is one metric at one percentile (or a rate): measured before,
// predicted after with its 80 % interval, measured after.
type Row struct {
	Metric string `json:"metric"`
	Stat   string `json:"stat"` // p50, p95, p99, rate
	Unit   string `json:"unit"` // ms, req/s
	// Before is the first run's measurement; TwinBefore the twin's own
	// first run (its fidelity).
	Before     float64 `json:"before"`
	TwinBefore float64 `json:"twin_before"`
	// Predicted is the twin's value after the change times Anchor (the
	// first run's value over its twin's: the twin's bias there taken
	// out); Low and High its 80 % interval; Draws every seed's value as
	// the twin gave it.
	Anchor    float64   `json:"anchor"`
	Predicted float64   `json:"predicted"`
	Low       float64   `json:"low"`
	High      float64   `json:"high"`
	Draws     []float64 `json:"draws"`
	// StatedError is the twin's stated relative error at this
	// percentile, the two-clock limit (capacity.StatedError without a
	// profile: a profile's residuals are per request, not a percentile's;
	// its fit at this row is BeforeMiss); BeforeMiss its miss of the
	// first run (|twin − measured| ÷ measured); the interval takes the
	// larger (RelativeError).
	StatedError float64 `json:"stated_error"`
	BeforeMiss  float64 `json:"before_miss"`
	// Sampling and Drift are the first run's Noise at this row, relative
	// standard deviations: the percentile's sampling error in the first
	// run's value the prediction is anchored on and in the second run's
	// measurement, and the spread between runs its halves show.
	Sampling float64 `json:"sampling"`
	Drift    float64 `json:"drift"`
	// ClockMS is the load generator's own clock lateness the interval
	// takes, in ms (Noise.ClockMS).
	ClockMS  float64 `json:"clock_ms"`
	Measured float64 `json:"measured"`
	// Error is (measured − predicted) ÷ predicted.
	Error   float64 `json:"error"`
	Verdict Verdict `json:"verdict"`
	// LedgerError is the ledger's 80th percentile of the lever's past
	// |error| at this row, over LedgerCount past rows (LedgerError); the
	// interval takes it as e where it exceeds RelativeError's. 0 and 0
	// without a ledger or with fewer than MinLedger.
	LedgerError float64 `json:"ledger_error,omitempty"`
	LedgerCount int     `json:"ledger_count,omitempty"`
}

// Verdict is how a measurement sits against its prediction.
type Verdict string

// The verdicts.
const (
	AsPredicted Verdict = "as predicted"
	Better      Verdict = "better than predicted"
	Worse       Verdict = "worse than predicted"
	Outside     Verdict = "outside the twin's envelope"
	NoData      Verdict = "no data"
)

// Method says how the intervals are made, for the output.
const Method = "80 % interval: c, the twin at the run's seed times the first run's value over its twin's, ± √(1.2816²·(s² + (σ·c)² + (d·c)²) + (e·c)² + m²), s the standard deviation over the draws' seeds (so scaled), σ the percentile's sampling error over the first run's requests (in the first run's value and, scaled to its count, the second's), d the drift between the first run's halves beyond it and the twin's, m the load generator's own clock lateness in either run at TTFT and E2E rows (its P50 for P50 rows, its P99 above), e the larger of the two-clock limit, the twin's miss of the first run at that row and, where the ledger holds 3 or more past verifies of the lever there, the 80th percentile of their |error|; the envelope is twice that (docs/metrics.md, \"Verify\")"

// z80 is the standard normal's 90th percentile: ± z80·σ holds 80 %.
const z80 = 1.2815515655446004

// Interval is the 80 % interval around the prediction c of draws (the
// first is c, the run's own seed), the twin's relative error e and the
// measurement's noise n: c ± h, h = √(z80²·(s² + (σ·c)² + (d·c)²) +
// (e·c)² + m²), s the draws' sample standard deviation, σ n.Sampling, d
// n.Drift and m n.ClockMS.
func Interval(draws []float64, e float64, n Noise) (c, lo, hi float64) {
	if len(draws) == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	c = draws[0]
	var s float64
	if k := len(draws); k > 1 {
		var mean float64
		for _, x := range draws {
			mean += x
		}
		mean /= float64(k)
		for _, x := range draws {
			s += (x - mean) * (x - mean)
		}
		s = math.Sqrt(s / float64(k-1))
	}
	v := s*s + (n.Sampling*c)*(n.Sampling*c) + (n.Drift*c)*(n.Drift*c)
	h := math.Sqrt(z80*z80*v + (e*c)*(e*c) + n.ClockMS*n.ClockMS)
	return c, c - h, c + h
}

// Judge gives a measurement's verdict against [lo, hi] around c: inside
// as predicted; beyond twice the half-width outside the envelope; else
// better or worse (lower is better unless higherBetter).
func Judge(measured, c, lo, hi float64, higherBetter bool) Verdict {
	if math.IsNaN(measured) || math.IsNaN(c) {
		return NoData
	}
	switch {
	case measured >= lo && measured <= hi:
		return AsPredicted
	case measured < c-2*(c-lo) || measured > c+2*(hi-c):
		return Outside
	case (measured < lo) != higherBetter:
		return Better
	}
	return Worse
}

// Verify runs the twin with the change and sets it beside the runs.
func Verify(ctx context.Context, cfg Config) (*Result, error) {
	start := time.Now()
	if cfg.Draws < 2 {
		return nil, field.Invalid("draws", cfg.Draws, "must be at least 2 (the interval needs a spread)")
	}
	beforePD, pdSource := pdOf(cfg.Twin.Deployment), "records"
	if cfg.After.Info.Simulated {
		pdSource = "simulated deployment"
	}
	changes, notes := merge(foldPD(Diff(cfg.Before, cfg.After), cfg.Before.server(), cfg.After.server(), beforePD, cfg.AfterPD, pdSource), cfg.Applied)
	for i, c := range changes {
		switch {
		case c.Source != "applied" || c.Before != "":
		case c.Setting == keyPDSplit:
			changes[i].Before = beforeSplit(cfg.Before.server(), beforePD)
		case c.Setting == keyKVLink:
			changes[i].Before = beforePD.Link
		default:
			changes[i].Before = cfg.Before.value(c.Setting)
		}
	}
	res := &Result{Before: cfg.Before.Dir, After: cfg.After.Dir, Changes: changes, Basis: cfg.Twin.Basis,
		Draws: cfg.Draws, Method: Method, Notes: notes}
	if err := applyBefore(&cfg.Twin.Deployment, changes); err != nil {
		return nil, err
	}
	bnotes, err := gatewayBasis(&cfg.Twin.Deployment, cfg.Before.server())
	if err != nil {
		return nil, err
	}
	res.Notes = append(res.Notes, bnotes...)
	d := cfg.Twin.Deployment
	if err := apply(&d, changes); err != nil {
		return nil, err
	}
	gnotes, err := foldGateways(&cfg.Twin.Deployment, &d, cfg.Before.server(), changes)
	if err != nil {
		return nil, err
	}
	res.Notes = append(res.Notes, gnotes...)
	w, seed, wnotes, err := workloadAfter(cfg, changes)
	if err != nil {
		return nil, err
	}
	res.Notes = append(res.Notes, wnotes...)
	res.Lever = leverName(changes)
	res.Notes = append(res.Notes, changeNotes(cfg, res.Lever, changes)...)
	res.Deployment = describe(d)
	var prof *perfmodel.Profile
	if p := d.Engine.Profile; p != "" {
		if prof, err = perfmodel.LoadProfile(p); err != nil {
			return nil, field.Wrap("profile", err)
		}
	}
	var mnotes []string
	if res.Rows, mnotes, err = compare(ctx, cfg, d, w, seed); err != nil {
		return nil, err
	}
	res.MachineMoved = len(mnotes) > 0 // compare's one note: machineNote's
	mnotes = append(mnotes, withLedger(res.Rows, cfg.Past, res.Lever)...)
	res.Notes = append(append(mnotes, fitNotes(res.Rows, prof, cfg.Before.Dir)...), res.Notes...)
	res.tally()
	res.ElapsedS = time.Since(start).Seconds()
	return res, nil
}

// compare reads both runs, draws the twins (deployment d, workload w from
// seed) and measures the first run's noise and both runs' clocks: the
// rows, and a note when the machine's load moved between the runs.
func compare(ctx context.Context, cfg Config, d capacity.Deployment, w capacity.Workload, seed uint64) ([]Row, []string, error) {
	before, err := report.Load(ctx, []string{cfg.Before.Dir}, report.Options{SLOs: cfg.SLOs, Resamples: 1})
	if err != nil {
		return nil, nil, err
	}
	after, err := report.Load(ctx, []string{cfg.After.Dir}, report.Options{SLOs: cfg.SLOs, Resamples: 1})
	if err != nil {
		return nil, nil, err
	}
	twinBefore, twinReqs, draws, err := drawTwins(ctx, cfg, d, w, seed)
	if err != nil {
		return nil, nil, err
	}
	measured, err := ReadRequests(cfg.Before.Dir)
	if err != nil {
		return nil, nil, fmt.Errorf("the first run's noise: %w", err)
	}
	var clocks []results.ClientLateness
	for _, dir := range []string{cfg.Before.Dir, cfg.After.Dir} {
		if l, ok := results.ReadClientLateness(dir); ok {
			clocks = append(clocks, l)
		}
	}
	return rows(before, after, twinBefore, draws, MeasureNoise(measured, twinReqs), clocks, len(cfg.SLOs) > 0), machineNote(clocks), nil
}

// machineShift is the difference between the runs' stall shares above
// which verify says the machine was not the same in both.
const machineShift = 0.05

// machineNote says when the load generator could not run for a share of
// one run's time 5 points or more apart from the other's (none
// otherwise, or where either run recorded none): a shared machine's load
// moved between the runs, which no twin models.
func machineNote(clocks []results.ClientLateness) []string {
	if len(clocks) != 2 {
		return nil
	}
	b, a := clocks[0].StallShare(), clocks[1].StallShare()
	if math.Abs(a-b) < machineShift {
		return nil
	}
	return []string{fmt.Sprintf("the machine was not the same in both runs: bench's own clock stalled for %.0f %% of the first run's time in flight and %.0f %% of the second's (summary.json client.timekeeping); an engine on the same machine lost at least as much, so a verdict here judges the machine's load as much as the twin", 100*b, 100*a)}
}

// changeNotes says what the twin cannot model of the changes, the twin's
// own notes and each run's warnings.
func changeNotes(cfg Config, lever string, changes []Change) []string {
	var notes []string
	if lever == "" {
		notes = append(notes, "no change the twin models was found between the runs (give --applied LEVER=VALUE when the evidence cannot tell): the prediction is the first run's twin again")
	}
	for _, c := range changes {
		if !c.Modeled {
			notes = append(notes, "not modelled: "+c.String())
		}
	}
	notes = append(notes, cfg.Twin.Notes...)
	for _, r := range []struct {
		name string
		run  Run
	}{{"the first run", cfg.Before}, {"the second run", cfg.After}} {
		for _, w := range r.run.Info.Warnings {
			notes = append(notes, r.name+"'s own warning: "+w)
		}
	}
	return notes
}

// drawTwins runs the first run's twin once (its report and its requests,
// for the noise), and the twin with the change (deployment d, workload w)
// cfg.Draws times, each on its own seed from seed (the run's whose
// workload w is).
func drawTwins(ctx context.Context, cfg Config, d capacity.Deployment, w capacity.Workload, seed uint64) (*report.Report, *Requests, []*report.Report, error) {
	reqs := &Requests{}
	twinBefore, err := twinDraw(cfg.Twin.Deployment, cfg.Twin.Workload, cfg.SLOs, cfg.Twin.Seed, reqs.Add)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("the first run's twin: %w", err)
	}
	draws := make([]*report.Report, cfg.Draws)
	for i := range draws {
		if err := ctx.Err(); err != nil {
			return nil, nil, nil, err
		}
		if draws[i], err = twinDraw(d, w, cfg.SLOs, seed+uint64(i), nil); err != nil {
			return nil, nil, nil, fmt.Errorf("the twin with the change: %w", err)
		}
	}
	return twinBefore, reqs, draws, nil
}

// tally counts the rows judged and those that held as predicted.
func (res *Result) tally() {
	for _, r := range res.Rows {
		if r.Verdict != NoData {
			res.Judged++
			if r.Verdict == AsPredicted {
				res.Held++
			}
		}
	}
}

// maxUseful is the twin's miss of the first run above which a row's
// interval says little.
const maxUseful = 0.25

// fitNotes says where the twin of the first run missed it by more than
// maxUseful, and whether the profile was fitted on the first run.
func fitNotes(rs []Row, prof *perfmodel.Profile, before string) []string {
	var out []string
	calibrated := prof != nil && sameDir(prof.Source, before)
	if prof != nil && !calibrated {
		out = append(out, "the profile was fitted on "+prof.Source+", not on the first run: the intervals take its miss of the first run; a profile calibrated on BEFORE fits it (tokentrace calibrate BEFORE … -o before.yaml; verify --profile before.yaml)")
	}
	if n := unreproduced(rs); n != "" {
		s := "the twin misses the first run by over 25 % at " + n + ": its intervals there carry that miss"
		if !calibrated {
			s += ", and a prediction is only as good as the twin of the first run (calibrate it on BEFORE: tokentrace calibrate BEFORE … -o before.yaml; verify --profile before.yaml)"
		}
		out = append(out, s)
	}
	return out
}

// sameDir says whether a and b name the same folder.
func sameDir(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}

// unreproduced names the rows at which the twin of the first run missed
// it by more than maxUseful ("" when none).
func unreproduced(rs []Row) string {
	var out []string
	for _, r := range rs {
		if r.Verdict != NoData && r.BeforeMiss > maxUseful {
			out = append(out, fmt.Sprintf("%s %s (%.0f %% off)", r.Metric, r.Stat, 100*r.BeforeMiss))
		}
	}
	return strings.Join(out, ", ")
}

// workloadAfter is the workload the twin runs after the change, and the
// seed of its first draw: the first run's, or the second's when the load
// itself changed (another seed included).
func workloadAfter(cfg Config, cs []Change) (capacity.Workload, uint64, []string, error) {
	var load []string
	for _, c := range cs {
		if c.Lever == "load" || c.Lever == "" && c.Modeled { // the load, or another sample of it
			load = append(load, c.Setting)
		}
	}
	if len(load) == 0 {
		return cfg.Twin.Workload, cfg.Twin.Seed, nil, nil
	}
	if cfg.AfterWorkload == nil {
		return capacity.Workload{}, 0, nil, fmt.Errorf("the load changed (%s) but the second run's workload cannot be rebuilt", strings.Join(load, ", "))
	}
	w := *cfg.AfterWorkload
	w.DefaultWarmup = false
	seed, at := cfg.AfterSeed, "at the second run's seed"
	if seed == 0 {
		seed, at = cfg.Twin.Seed, "at the first run's seed (the second's is not known)"
	}
	return w, seed, []string{"the load changed (" + strings.Join(load, ", ") + "): the twin replays the second run's workload " + at + " (" + w.Describe + ")"}, nil
}

// leverName joins the modelled levers.
func leverName(cs []Change) string {
	var out []string
	for _, c := range cs {
		if c.Modeled && c.Lever != "" && !containsStr(out, c.Lever) {
			out = append(out, c.Lever)
		}
	}
	return strings.Join(out, "+")
}

func containsStr(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// twinDraw runs the twin once on seed and reports its records as report
// reads a run: the same formulas on both sides; also, when not nil,
// hands each record to also.
func twinDraw(d capacity.Deployment, w capacity.Workload, slos []latency.SLO, seed uint64, also func(*latency.Record)) (*report.Report, error) {
	w.DefaultWarmup = false // the run's own warm-up, as it had it
	c := report.NewCollector(report.Options{SLOs: slos, Resamples: 1})
	add := c.Add
	if also != nil {
		add = func(r *latency.Record) { c.Add(r); also(r) }
	}
	if _, err := capacity.Evaluate(d, w, nil, w.Rate, capacity.Options{Seed: seed, MinSpan: time.Nanosecond, Records: add}); err != nil {
		return nil, err
	}
	return c.Report(), nil
}

func describe(d capacity.Deployment) string {
	e := d.Engine
	if ec, _, err := e.Config(); err == nil {
		ec = ec.WithDefaults()
		e.MaxNumSeqs, e.MaxNumBatchedTokens = ec.MaxNumSeqs, ec.MaxNumBatchedTokens
	}
	s := fmt.Sprintf("%d × %s on %s TP%d, max_num_seqs %d, max_num_batched_tokens %d, prefix caching %v, chunked prefill %v",
		max(d.Replicas, 1), e.Model, e.GPU, e.TensorParallelSize, e.MaxNumSeqs, e.MaxNumBatchedTokens, e.EnablePrefixCaching, e.EnableChunkedPrefill)
	if e.MaxWaiting > 0 {
		s += fmt.Sprintf(", max_waiting %d", e.MaxWaiting)
	}
	if d.MaxMaxTokens > 0 {
		s += fmt.Sprintf(", max_tokens ≤ %d", d.MaxMaxTokens)
	}
	if d.Disaggregated() {
		s += fmt.Sprintf(", disaggregated %dP:%dD (the %d × are the decode pool) over %s", d.PrefillReplicas, max(d.Replicas, 1), max(d.Replicas, 1), d.KVLink)
	}
	return s
}
