package capacity

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// PDAnswer answers "aggregated or disaggregated, and which ratio" for a
// plan whose space holds both (or several P:D ratios): the best candidate
// of each way of serving, each ratio's best, and whether the twin's stated
// error could reverse the verdict (docs/plan.md, "Aggregated or
// disaggregated").
type PDAnswer struct {
	// Aggregated and Disaggregated are the best candidate of each kind
	// that meets the SLOs (by the plan's order: cheapest at the target,
	// or highest goodput); nil when none does.
	Aggregated, Disaggregated *Candidate
	// Ratios lists, per pool split ("agg" or "P:D"), its best candidate:
	// the best that meets, else the one that misses by the least.
	Ratios []PDRatio
	// Verdict says which way serves the objective and why, in one line.
	Verdict string
	// Close is set when the twin's stated error could reverse the verdict
	// or its SLO margin (the latencies' intervals overlap, or the winner
	// meets only within its error).
	Close bool
}

// PDRatio is one pool split's best candidate.
type PDRatio struct {
	Ratio     string
	Candidate *Candidate
	Meets     bool
	// Low and High bound the candidate's latency by the twin's stated
	// error (StatedError at the plan's first SLO): value × (1 ∓ error).
	Low, High time.Duration
	Err       float64
}

// pdAnswer builds the answer when the plan weighed more than one pool
// split; nil otherwise.
func (pl *Plan) pdAnswer(ok []*Candidate, target bool) *PDAnswer {
	splits := map[string][]*Candidate{}
	var order []string
	for _, c := range pl.Candidates {
		if c.Status == NoFit || c.Status == Duplicate {
			continue
		}
		k := c.Ratio()
		if k == "" {
			k = "agg"
		}
		if _, seen := splits[k]; !seen {
			order = append(order, k)
		}
		splits[k] = append(splits[k], c)
	}
	if len(order) < 2 || !slices.ContainsFunc(order, func(k string) bool { return k != "agg" }) {
		return nil
	}
	a := &PDAnswer{}
	errs := pl.statedErrors()
	for _, k := range order {
		r := PDRatio{Ratio: k}
		for _, c := range splits[k] {
			if slices.Contains(ok, c) && (r.Candidate == nil || better(c, r.Candidate, target) < 0) {
				r.Candidate, r.Meets = c, true
			}
		}
		if r.Candidate == nil {
			r.Candidate = nearest(splits[k])
		}
		if c := r.Candidate; c != nil {
			r.Err = errs(c)
			if l := c.Latency(target); l != Unbounded {
				r.Low, r.High = time.Duration(float64(l)*(1-r.Err)), time.Duration(float64(l)*(1+r.Err))
			}
		}
		a.Ratios = append(a.Ratios, r)
		if r.Meets {
			best := &a.Disaggregated
			if k == "agg" {
				best = &a.Aggregated
			}
			if *best == nil || better(r.Candidate, *best, target) < 0 {
				*best = r.Candidate
			}
		}
	}
	a.Verdict, a.Close = pl.pdVerdict(a, target)
	return a
}

// nearest is the candidate of cs that misses the SLOs by the least.
func nearest(cs []*Candidate) *Candidate {
	var best *Candidate
	m := math.Inf(1)
	for _, c := range cs {
		if x := c.simulatedMiss(); best == nil || x < m {
			best, m = c, x
		}
	}
	return best
}

// statedErrors is the twin's stated error at the plan's first SLO for a
// candidate: its profile's residual, else the two-clock limit.
func (pl *Plan) statedErrors() func(*Candidate) float64 {
	s := pl.Objective.SLOs[0]
	profiles := map[string]*perfmodel.Profile{}
	return func(c *Candidate) float64 {
		path := c.Engine.Profile
		p, seen := profiles[path]
		if !seen && path != "" {
			p, _ = perfmodel.LoadProfile(path) // loaded once already by Search
			profiles[path] = p
		}
		return StatedError(p, s.Metric, s.Percentile)
	}
}

// pdVerdict says which way wins and whether the twin's error could
// reverse it.
func (pl *Plan) pdVerdict(a *PDAnswer, target bool) (string, bool) {
	ag, di := a.Aggregated, a.Disaggregated
	switch {
	case ag == nil && di == nil:
		return "neither aggregated nor disaggregated serving meets the SLOs", false
	case di == nil:
		return "aggregated: no disaggregated candidate meets the SLOs", pl.marginal(ag, target)
	case ag == nil:
		return fmt.Sprintf("disaggregated %s: no aggregated candidate meets the SLOs", di.Ratio()), pl.marginal(di, target)
	}
	win, lose := ag, di
	if better(di, ag, target) < 0 {
		win, lose = di, ag
	}
	name := func(c *Candidate) string {
		if c.Disaggregated() {
			return "disaggregated " + c.Ratio()
		}
		return "aggregated"
	}
	var why string
	near := false
	e := pl.statedErrors()(win)
	switch {
	case target && win.USDPerHour < lose.USDPerHour:
		why = fmt.Sprintf("it costs $%.2f/h, %s $%.2f/h", win.USDPerHour, name(lose), lose.USDPerHour)
	case target:
		wl, ll := win.Latency(true), lose.Latency(true)
		why = fmt.Sprintf("the same cost, %s %s against %s", pl.latencyName(), fmtDur(wl), fmtDur(ll))
		near = float64(wl)*(1+e) >= float64(ll)*(1-e)
	default:
		wg, lg := win.GoodputRate(), lose.GoodputRate()
		why = fmt.Sprintf("goodput %.3g req/s against %.3g", wg, lg)
		near = wg*(1-e) <= lg*(1+e)
	}
	v := fmt.Sprintf("%s (#%d): %s", name(win), win.ID, why)
	if near {
		v += "; within the twin's stated error of each other"
	}
	return v, near || pl.marginal(win, target)
}

// marginal says whether c meets the first SLO only within the twin's
// stated error (its value × (1 + error) is over the threshold).
func (pl *Plan) marginal(c *Candidate, target bool) bool {
	s := pl.Objective.SLOs[0]
	l := c.Latency(target)
	return l != Unbounded && float64(l)*(1+pl.statedErrors()(c)) > float64(s.Max)
}

// writePD prints the P/D answer.
func (pl *Plan) writePD(b *strings.Builder) {
	a := pl.PD
	if a == nil {
		return
	}
	target := pl.Objective.TargetRate > 0
	fmt.Fprintf(b, "\naggregated or disaggregated: %s\n", a.Verdict)
	if a.Close {
		b.WriteString("         close: the twin's stated error could reverse this; measure both (tokentrace verify)\n")
	}
	for _, r := range a.Ratios {
		c := r.Candidate
		if c == nil {
			continue
		}
		line := fmt.Sprintf("  %-5s #%d $%.2f/h", r.Ratio, c.ID, c.USDPerHour)
		if l := c.Latency(target); l != Unbounded {
			line += fmt.Sprintf(" · %s %s (±%.0f%%: %s–%s)", pl.latencyName(), fmtDur(l), 100*r.Err, fmtDur(r.Low), fmtDur(r.High))
		}
		if g := c.GoodputRate(); g > 0 {
			line += fmt.Sprintf(" · goodput %.3g req/s", g)
		}
		if !r.Meets {
			line += " · misses: " + c.Reason
		}
		fmt.Fprintf(b, "%s · %s\n", line, c.Name)
	}
}

// jsonPD is the P/D answer's JSON (nil without one).
func (pl *Plan) jsonPD() *jsonPD {
	a := pl.PD
	if a == nil {
		return nil
	}
	out := &jsonPD{Verdict: a.Verdict, Close: a.Close, Ratios: []jsonPDRatio{}}
	if a.Aggregated != nil {
		out.Aggregated = &a.Aggregated.ID
	}
	if a.Disaggregated != nil {
		out.Disaggregated = &a.Disaggregated.ID
	}
	target := pl.Objective.TargetRate > 0
	for _, r := range a.Ratios {
		if r.Candidate == nil {
			continue
		}
		j := jsonPDRatio{Ratio: r.Ratio, ID: r.Candidate.ID, Meets: r.Meets, Error: r.Err}
		if l := r.Candidate.Latency(target); l != Unbounded {
			j.LatencyMS, j.LowMS, j.HighMS = float64(l)/1e6, float64(r.Low)/1e6, float64(r.High)/1e6
		}
		out.Ratios = append(out.Ratios, j)
	}
	return out
}

// pdHTML is the P/D answer as the plan's page shows it (nil without one).
type pdHTML struct {
	Verdict string
	Close   bool
	Rows    []pdHTMLRow
}

type pdHTMLRow struct {
	Ratio, Name, Cost, Latency, Goodput, Meets string
	ID                                         int
}

func (pl *Plan) pdHTML() *pdHTML {
	a := pl.PD
	if a == nil {
		return nil
	}
	target := pl.Objective.TargetRate > 0
	out := &pdHTML{Verdict: a.Verdict, Close: a.Close}
	for _, r := range a.Ratios {
		c := r.Candidate
		if c == nil {
			continue
		}
		row := pdHTMLRow{Ratio: r.Ratio, ID: c.ID, Name: c.Name, Cost: fmt.Sprintf("%.2f", c.USDPerHour), Meets: "yes"}
		if l := c.Latency(target); l != Unbounded {
			row.Latency = fmt.Sprintf("%s (±%.0f%%: %s–%s)", fmtDur(l), 100*r.Err, fmtDur(r.Low), fmtDur(r.High))
		}
		if g := c.GoodputRate(); g > 0 {
			row.Goodput = fmt.Sprintf("%.3g", g)
		}
		if !r.Meets {
			row.Meets = "no: " + c.Reason
		}
		out.Rows = append(out.Rows, row)
	}
	return out
}
