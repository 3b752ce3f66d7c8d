package report

import (
	"maps"
	"slices"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// phaseSummaries fills rep.Phases when the records carry more than one
// phase (a sweep), and rep.Capacity.
func (a *analysis) phaseSummaries(rep *Report) {
	used := map[uint16]bool{}
	for i := range a.rows {
		used[a.rows[i].phase] = true
	}
	if len(used) < 2 {
		return
	}
	points := map[string]results.SweepPoint{}
	for _, run := range a.runs {
		for _, p := range run.Points {
			points[p.Phase] = p
		}
	}
	spans := span(a.rows, func(r *row) int { return int(r.phase)<<16 | int(r.src) })
	for _, p := range slices.Sorted(maps.Keys(used)) {
		ph := a.phase(p, spans)
		if pt, ok := points[a.phases[p]]; ok {
			if pt.OfferedRate > 0 {
				ph.OfferedRPS = pt.OfferedRate
			}
			ph.Concurrency = pt.Concurrency
			ph.BeforeCell, ph.BeforeCellWarning = pt.BeforeCell, pt.BeforeCellWarning
		}
		rep.Phases = append(rep.Phases, ph)
	}
	slices.SortStableFunc(rep.Phases, func(x, y Phase) int {
		if x.OfferedRPS != y.OfferedRPS {
			if x.OfferedRPS < y.OfferedRPS {
				return -1
			}
			return 1
		}
		return x.Concurrency - y.Concurrency
	})
	rep.Capacity = a.capacity(rep.Phases)
	rep.Pareto = a.pareto(rep.Phases, rep.Capacity)
}

// phase summarises the records of one phase.
func (a *analysis) phase(p uint16, spans map[int][2]int64) Phase {
	name := a.phases[p]
	if name == "" {
		name = "(none)"
	}
	ph := Phase{Name: name}
	var ttft, tpot, e2e []int64
	var outTok int64
	meeting := 0
	for i := range a.rows {
		r := &a.rows[i]
		if r.phase != p {
			continue
		}
		ph.Requests++
		if meetsAll(r, a.opts.SLOs) {
			meeting++
		}
		if !r.ok() {
			continue
		}
		ph.Succeeded++
		outTok += int64(r.output)
		for _, m := range []struct {
			name latency.Metric
			s    *[]int64
		}{{latency.TTFT, &ttft}, {latency.TPOT, &tpot}, {latency.E2E, &e2e}} {
			if v, ok := metricValue(r, m.name); ok {
				*m.s = append(*m.s, v)
			}
		}
	}
	var d int64
	for k, sp := range spans {
		if uint16(k>>16) == p {
			d += sp[1] - sp[0]
		}
	}
	ph.DurationS = float64(d) / 1e9
	ph.OfferedRPS = offeredRate(a.rows, func(r *row) bool { return r.phase == p })
	ph.CompletionRPS = completionRate(a.rows, func(r *row) bool { return r.phase == p })
	if ph.DurationS > 0 {
		ph.ThroughputRPS = float64(ph.Succeeded) / ph.DurationS
		ph.GoodputRPS = float64(meeting) / ph.DurationS
		ph.OutputTPS = float64(outTok) / ph.DurationS
	}
	if ph.Requests > 0 {
		ph.Attainment = float64(meeting) / float64(ph.Requests)
	}
	for _, s := range [][]int64{ttft, tpot, e2e} {
		slices.Sort(s)
	}
	ph.TTFTP50, ph.TTFTP99 = ms(stats.Percentile(ttft, 50)), ms(stats.Percentile(ttft, 99))
	ph.TPOTP50, ph.TPOTP99 = ms(stats.Percentile(tpot, 50)), ms(stats.Percentile(tpot, 99))
	ph.E2EP50, ph.E2EP99 = ms(stats.Percentile(e2e, 50)), ms(stats.Percentile(e2e, 99))
	ph.SLOsMet = ph.Succeeded > 0 && phaseMeets(a.opts.SLOs, ttft, tpot, e2e)
	return ph
}

// capacity is the highest offered rate whose SLOs hold and whose
// completion rate keeps up (≥ 95 % of offered); without SLOs, the last
// that keeps up. phases are sorted by offered rate.
func (a *analysis) capacity(phases []Phase) *Capacity {
	var c *Capacity
	for _, ph := range phases {
		keeps := ph.OfferedRPS > 0 && ph.CompletionRPS >= 0.95*ph.OfferedRPS
		if keeps && (len(a.opts.SLOs) == 0 || ph.SLOsMet) {
			basis := "highest offered rate whose completion rate kept up (≥95% of offered)"
			if len(a.opts.SLOs) > 0 {
				basis = "highest offered rate meeting every SLO with completion rate ≥95% of offered"
			}
			c = &Capacity{RPS: ph.OfferedRPS, Phase: ph.Name, Basis: basis}
		}
	}
	return c
}
