package capacity

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// finish shares results with duplicates, prices the tokens, picks the
// answer and draws the Pareto front.
func (pl *Plan) finish() {
	target := pl.Objective.TargetRate > 0
	for _, c := range pl.Candidates {
		if c.Status == Duplicate {
			c.Check, c.Goodput = c.Of.Check, c.Of.Goodput
			c.Reason = fmt.Sprintf("simulates as #%d (%s)", c.Of.ID, c.Of.Status)
		}
		if g := c.Goodput; g != nil && g.At != nil && g.Rate > 0 {
			c.USDPer1MOut = perfmodel.USDPerMillion(c.USDPerHour, g.Rate*g.At.MeanOutput())
		}
	}
	var ok, inside []*Candidate
	for _, c := range pl.Candidates {
		switch {
		case target && (c.Status == Meets || c.Status == Dominated):
			ok = append(ok, c)
		case !target && c.Status == Searched && c.GoodputRate() > 0:
			ok = append(ok, c)
		default:
			continue
		}
		if c.Outside = c.outside(target); len(c.Outside) == 0 {
			inside = append(inside, c)
		}
	}
	// The answer is inside the envelope where any candidate is; else the
	// best outside, flagged.
	pick := inside
	if len(pick) == 0 {
		pick = ok
	}
	if len(pick) > 0 {
		pl.Best = slices.MinFunc(pick, func(a, b *Candidate) int { return better(a, b, target) })
	}
	pl.Front = front(ok, target)
	pl.PD = pl.pdAnswer(ok, target)
	if pl.Best == nil {
		pl.Closest = pl.closest()
	}
}

// outside is where c's prediction (at the target rate, or at goodput)
// leaves the twin's envelope; it also sets c's 80 % interval there.
func (c *Candidate) outside(target bool) []string {
	p := c.Check
	if !target && c.Goodput != nil {
		p = c.Goodput.At
	}
	if p == nil {
		return nil
	}
	flags, err := c.Deployment.OutsideEnvelope(*p)
	if err != nil {
		return []string{"the envelope is unknown: " + err.Error()}
	}
	if c.Interval80, c.Unfitted, err = c.Deployment.Interval80(*p); err != nil {
		return []string{"the envelope is unknown: " + err.Error()}
	}
	return flags
}

// better orders candidates by the objective: cheapest first for a target
// (then the lower latency, then the higher goodput), highest goodput first
// for throughput (then the cheaper); then by ID.
func better(a, b *Candidate, target bool) int {
	var c int
	if target {
		c = cmp.Or(cmp.Compare(a.USDPerHour, b.USDPerHour), cmp.Compare(a.Latency(true), b.Latency(true)),
			cmp.Compare(b.GoodputRate(), a.GoodputRate()))
	} else {
		c = cmp.Or(cmp.Compare(b.GoodputRate(), a.GoodputRate()), cmp.Compare(a.USDPerHour, b.USDPerHour))
	}
	return cmp.Or(c, cmp.Compare(a.ID, b.ID))
}

// front is the Pareto front of cost (lower), latency (lower) and goodput
// (higher) among cs, cheapest first. A dominated candidate, whose goodput
// search was skipped, is never on it: a cheaper one is at least as fast
// and serves more.
func front(cs []*Candidate, target bool) []*Candidate {
	var out []*Candidate
	for _, c := range cs {
		if c.Goodput == nil || c.Status == Dominated {
			continue
		}
		dominated := false
		for _, d := range cs {
			if d == c || d.Goodput == nil || d.Status == Dominated {
				continue
			}
			le := d.USDPerHour <= c.USDPerHour && d.Latency(target) <= c.Latency(target) && d.GoodputRate() >= c.GoodputRate()
			lt := d.USDPerHour < c.USDPerHour || d.Latency(target) < c.Latency(target) || d.GoodputRate() > c.GoodputRate()
			if le && (lt || d.ID < c.ID) {
				dominated = true
				break
			}
		}
		if !dominated {
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, func(a, b *Candidate) int {
		return cmp.Or(cmp.Compare(a.USDPerHour, b.USDPerHour), cmp.Compare(a.ID, b.ID))
	})
	return out
}

// closest is the candidate that misses the SLOs by the least: by the
// simulation at the target (or at the lowest rate a throughput plan
// tried), else by the roofline bounds.
func (pl *Plan) closest() *Candidate {
	var best *Candidate
	bestMiss := math.Inf(1)
	for _, c := range pl.Candidates {
		if c.Status == Duplicate {
			continue
		}
		if m := c.simulatedMiss(); m < bestMiss {
			best, bestMiss = c, m
		}
	}
	if best != nil {
		return best
	}
	for _, c := range pl.Candidates {
		if c.Status == Duplicate || c.Status == NoFit {
			continue
		}
		if m := pl.boundMiss(c); m < bestMiss {
			best, bestMiss = c, m
		}
	}
	return best
}

// simulatedMiss is how far the candidate's simulation missed the SLOs
// (+Inf when it was not simulated with values).
func (c *Candidate) simulatedMiss() float64 {
	switch {
	case c.Check != nil && c.Check.Values != nil:
		return c.Check.Miss
	case c.Goodput != nil && c.Goodput.Above != nil && c.Goodput.Above.Values != nil:
		return c.Goodput.Above.Miss
	}
	return math.Inf(1)
}

// boundMiss is how far the roofline bounds say the candidate must miss:
// the larger of target ÷ rate bound and each SLO's lower bound ÷ threshold.
func (pl *Plan) boundMiss(c *Candidate) float64 {
	m := 0.0
	if t := pl.Objective.TargetRate; t > 0 && c.Bound.MaxRate > 0 {
		m = t / c.Bound.MaxRate
	}
	for i, s := range pl.Objective.SLOs {
		m = max(m, float64(c.Bound.MinValues[i])/float64(s.Max))
	}
	return m
}

// missReason says which SLOs a point misses, and by how much.
func (pl *Plan) missReason(p Point) string {
	if p.Values == nil {
		return "an SLO failed (the simulation stopped as soon as it was certain)"
	}
	var parts []string
	if !p.KeepsUp {
		parts = append(parts, fmt.Sprintf("falls behind (%.0f%% of arrivals pile up in flight)", 100*p.Growth))
	}
	for i, s := range pl.Objective.SLOs {
		v := p.Values[i]
		if v <= s.Max {
			continue
		}
		if v == Unbounded {
			parts = append(parts, fmt.Sprintf("%s: more than %g%% of requests failed", s, 100-s.Percentile))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s misses by %.0f%% (%s)", s, 100*(float64(v)/float64(s.Max)-1), fmtDur(v)))
	}
	return strings.Join(parts, "; ") + " at " + fmtRate(p.Rate)
}

// fmtDur prints a duration with 3 significant figures.
func fmtDur(d time.Duration) string {
	switch {
	case d == Unbounded:
		return "∞"
	case d >= time.Second:
		return fmt.Sprintf("%.3gs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.3gms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.3gµs", float64(d)/1e3)
}

func fmtRate(r float64) string { return fmt.Sprintf("%.3g req/s", r) }
