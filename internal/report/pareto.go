package report

import (
	"fmt"
	"slices"
	"strings"
)

// Pareto is a sweep's trade-off between interactivity and efficiency: per
// point, the output tokens per second each user sees (1 ÷ TPOT P50) and
// the output tokens per second of the whole server, per GPU (Options.GPUs)
// or per replica. A point is on the front when no other point is at least
// as good on both axes and better on one. The knee is the point of
// highest throughput whose SLOs hold: past it, more load buys tokens per
// GPU only by breaking an SLO.
type Pareto struct {
	// Per is "gpu" or "replica": what PerGPU divides by.
	Per  string `json:"per"`
	GPUs int    `json:"gpus,omitempty"`
	// Points are the sweep's points in the order of Report.Phases.
	Points []ParetoPoint `json:"points"`
	// Knee names the SLO knee's phase; empty without SLOs, or when no
	// point meets them (KneeBasis says which).
	Knee      string `json:"knee,omitempty"`
	KneeBasis string `json:"knee_basis"`
}

// ParetoPoint is one sweep point on the trade-off.
type ParetoPoint struct {
	Phase string `json:"phase"`
	// PerUser is tokens/s per user: 1000 ÷ the phase's TPOT P50 in ms.
	PerUser float64 `json:"tokens_per_s_per_user"`
	// PerGPU is the phase's output tokens/s ÷ GPUs (or per replica).
	PerGPU  float64 `json:"tokens_per_s_per_gpu"`
	Front   bool    `json:"front"`
	SLOsMet bool    `json:"slos_met"`
}

// pareto places the phases on the trade-off; nil for fewer than two
// points with a TPOT (a sweep of one-token answers has no per-user speed).
func (a *analysis) pareto(phases []Phase, capacity *Capacity) *Pareto {
	p := &Pareto{Per: "replica"}
	if a.opts.GPUs > 0 {
		p.Per, p.GPUs = "gpu", a.opts.GPUs
	}
	div := float64(max(a.opts.GPUs, 1))
	for _, ph := range phases {
		if ph.TPOTP50 <= 0 || ph.OutputTPS <= 0 {
			continue
		}
		p.Points = append(p.Points, ParetoPoint{Phase: ph.Name, PerUser: 1000 / ph.TPOTP50,
			PerGPU: ph.OutputTPS / div, SLOsMet: len(a.opts.SLOs) > 0 && ph.SLOsMet})
	}
	if len(p.Points) < 2 {
		return nil
	}
	markFront(p.Points)
	p.Knee, p.KneeBasis = knee(phases, p.Points, capacity, len(a.opts.SLOs) > 0)
	return p
}

// markFront sets Front on each point no other point dominates.
func markFront(pts []ParetoPoint) {
	for i := range pts {
		pts[i].Front = !slices.ContainsFunc(pts, func(q ParetoPoint) bool {
			return q.PerGPU >= pts[i].PerGPU && q.PerUser >= pts[i].PerUser &&
				(q.PerGPU > pts[i].PerGPU || q.PerUser > pts[i].PerUser)
		})
	}
}

// knee is the SLO knee: the capacity point when the sweep has one (the
// highest offered rate meeting every SLO and keeping up), otherwise the
// point of highest token throughput meeting every SLO.
func knee(phases []Phase, pts []ParetoPoint, capacity *Capacity, slos bool) (string, string) {
	if !slos {
		return "", "no SLOs given (--slo): no knee"
	}
	if capacity != nil && slices.ContainsFunc(pts, func(q ParetoPoint) bool { return q.Phase == capacity.Phase }) {
		return capacity.Phase, "the capacity point: " + capacity.Basis
	}
	best, at := "", 0.0
	for _, q := range pts {
		if q.SLOsMet && q.PerGPU > at {
			best, at = q.Phase, q.PerGPU
		}
	}
	if best == "" {
		return "", "no sweep point meets every SLO"
	}
	return best, "the highest token throughput meeting every SLO"
}

// unit names PerGPU's unit in words.
func (p *Pareto) unit() string { return "tok/s " + p.per() }

// per says what PerGPU is per.
func (p *Pareto) per() string {
	if p.Per == "gpu" {
		return fmt.Sprintf("per GPU (%d GPUs)", p.GPUs)
	}
	return "per replica"
}

// front lists the front's points in words, lowest throughput first.
func (p *Pareto) front() string {
	var parts []string
	for _, q := range p.sorted() {
		if q.Front {
			parts = append(parts, fmt.Sprintf("%s (%s tok/s/user, %s tok/s)", q.Phase, num(q.PerUser), num(q.PerGPU)))
		}
	}
	return strings.Join(parts, ", ")
}

// sorted is the points by PerGPU, lowest first.
func (p *Pareto) sorted() []ParetoPoint {
	out := slices.Clone(p.Points)
	slices.SortStableFunc(out, func(x, y ParetoPoint) int {
		switch {
		case x.PerGPU < y.PerGPU:
			return -1
		case x.PerGPU > y.PerGPU:
			return 1
		}
		return 0
	})
	return out
}

// Lines is the trade-off in words: the front and the knee.
func (p *Pareto) Lines() []string {
	out := []string{fmt.Sprintf("Pareto front (tok/s per user vs %s): %s", p.unit(), p.front())}
	if p.Knee != "" {
		out = append(out, fmt.Sprintf("SLO knee: %s (%s)", p.Knee, p.KneeBasis))
	} else {
		out = append(out, "SLO knee: none — "+p.KneeBasis)
	}
	return out
}
