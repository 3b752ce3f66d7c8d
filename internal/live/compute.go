package live

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// snapshot computes the snapshot at instant now from what was taken in,
// and returns the report when it computed one.
func (a *aggregator) snapshot(now int64, c counts, final bool) (*Snapshot, *report.Report) {
	a.seq++
	s := &Snapshot{Seq: a.seq, Final: final, ElapsedS: sec(now), WindowS: a.cfg.Window.Seconds(),
		Phase: a.phase, Sent: c.sent, Done: c.done, InFlight: max(c.sent-c.done, 0),
		Failures: maps.Clone(a.failures), Warnings: []string{}, SLOs: sloLines(a.cfg.Report.SLOs)}
	a.win.merge(now, &a.ws)
	offered, achieved := a.rates(now, c.sent)
	s.Window = windowFigures(&a.ws, offered, achieved)
	s.Stages = stages(&a.ws)
	if a.cfg.Gauges != nil {
		if g, ok := a.cfg.Gauges(); ok {
			s.Gauges = &Gauges{AtS: sec(g.AtNS), Running: g.Running, Waiting: g.Waiting, KVUsage: g.KVCacheUsage}
		}
	}
	if a.cfg.Warnings != nil {
		w := a.cfg.Warnings()
		s.Warnings = append(s.Warnings, w[:min(len(w), maxWarnings)]...)
	}
	var rep *report.Report
	if a.cfg.Gateway {
		s.View, s.Dropped, s.Groups = "gateway", c.dropped, a.groupRows(now)
		s.InFlight = 0 // the pools' admitted requests now
		for _, g := range s.Groups {
			if g.Kind == "pool" {
				s.InFlight += int64(g.InFlight)
			}
		}
	} else if final || c.watched && now >= a.nextReport && a.added > a.reported && a.cpuAllows() {
		rep = a.fromReport(now)
	}
	s.Since, s.SinceAtS, s.Findings, s.Phases = a.since, sec(a.sinceAt), a.findings, a.phases
	if now > 0 {
		if len(a.history) == 2*maxHistory { // into a new array: published snapshots keep theirs as they were
			a.history = append(make([]Point, 0, 2*maxHistory), a.history[maxHistory:]...)
		}
		a.history = append(a.history, point(s))
	}
	s.History = slices.Clip(a.history[max(len(a.history)-maxHistory, 0):])
	if a.ttft.Count() > 0 {
		p := a.ttft.Percentiles(50, 99)
		s.ttftP50, s.ttftP99 = ms(p[0]), ms(p[1])
	}
	return s, rep
}

// rates are the sends and successes per second over the window, from the
// counters at the ticks within it (and the one just before it; the run's
// start counts as a tick with nothing sent).
func (a *aggregator) rates(now, sent int64) (offered, achieved float64) {
	a.ticks = append(a.ticks, tick{at: now, sent: sent, ok: a.ok})
	from := now - int64(a.cfg.Window)
	k := 0
	for k+1 < len(a.ticks)-1 && a.ticks[k+1].at <= from {
		k++
	}
	a.ticks = slices.Delete(a.ticks, 0, k)
	first, last := a.ticks[0], a.ticks[len(a.ticks)-1]
	dt := sec(last.at - first.at)
	if dt <= 0 {
		return 0, 0
	}
	return float64(last.sent-first.sent) / dt, float64(last.ok-first.ok) / dt
}

// fromReport recomputes the since-start numbers, the findings and the
// sweep's phases with the report's own code, and when to do it next.
func (a *aggregator) fromReport(now int64) *report.Report {
	t0, cpu0 := time.Now(), a.cpu()
	rep := a.coll.Report()
	cost := time.Since(t0)
	a.nextReport = now + int64(max(minReportEvery, reportBudget*cost))
	if cpu1 := a.cpu(); cpu1 > 0 {
		a.lastCPU, a.perRecord = cpu1, float64(cpu1-cpu0)/float64(max(a.added, 1))
	}
	a.sinceAt, a.reported = now, a.added
	a.since = sinceFigures(rep)
	a.findings = make([]Finding, 0, len(rep.Findings))
	for _, f := range rep.Findings {
		a.findings = append(a.findings, Finding{Rule: f.Rule, Severity: string(f.Severity), Title: f.Title, Evidence: f.Evidence})
	}
	a.phases = nil
	if len(rep.Phases) > 1 {
		for _, p := range rep.Phases {
			a.phases = append(a.phases, PhaseRow{Name: p.Name, OfferedRPS: p.OfferedRPS, ThroughputRPS: p.ThroughputRPS,
				GoodputRPS: p.GoodputRPS, TTFTP99: p.TTFTP99, TPOTP99: p.TPOTP99, SLOsMet: p.SLOsMet})
		}
	}
	return rep
}

// cpu is the process's CPU time, 0 when unknown.
func (a *aggregator) cpu() time.Duration {
	if a.cfg.CPU == nil {
		return 0
	}
	return a.cfg.CPU()
}

// cpuAllows reports whether the process has spent, since the last
// since-start computation, cpuBudget × what the next one is expected to
// cost (its cost grows with the records), so that each is paid for
// before it runs.
func (a *aggregator) cpuAllows() bool {
	if a.lastCPU == 0 {
		return true
	}
	return float64(a.cpu()-a.lastCPU) >= cpuBudget*a.perRecord*float64(a.added)
}

// sinceFigures are the report's summary and distributions, as they are.
func sinceFigures(rep *report.Report) Figures {
	s := rep.Summary
	f := Figures{Requests: int64(s.Requests), Succeeded: int64(s.Succeeded), Failed: int64(s.Failed),
		OfferedRPS: s.OfferedRPS, AchievedRPS: s.ThroughputRPS, Metrics: []Metric{}}
	for _, m := range metricNames {
		for _, d := range rep.Metrics {
			if d.Metric == string(m) {
				f.Metrics = append(f.Metrics, Metric{Name: d.Metric, Count: d.Count, Mean: d.Mean, P50: d.P50, P90: d.P90, P99: d.P99, Max: d.Max})
			}
		}
	}
	f.Errors = kindNums(s.Errors)
	return f
}

// windowFigures are the window's counts and percentiles.
func windowFigures(ws *windowStats, offered, achieved float64) Figures {
	f := Figures{Requests: ws.ok + ws.fail, Succeeded: ws.ok, Failed: ws.fail, OfferedRPS: offered, AchievedRPS: achieved,
		Metrics: make([]Metric, 0, len(metricNames)), Approx: true, Errors: kindNums(ws.kinds)}
	for i, m := range metricNames {
		f.Metrics = append(f.Metrics, histMetric(string(m), &ws.hist[i]))
	}
	return f
}

// histMetric reads one window's sketch (nearest rank, within
// stats.SketchError).
func histMetric(name string, h *stats.Sketch) Metric {
	m := Metric{Name: name, Count: h.Count()}
	if m.Count == 0 {
		return m
	}
	m.Mean = h.Mean() / 1e6
	p := h.Percentiles(50, 90, 99)
	m.P50, m.P90, m.P99 = ms(p[0]), ms(p[1]), ms(p[2])
	m.Max = ms(h.Max())
	return m
}

// kindNums orders counts by kind, the most frequent first.
func kindNums[N int | int64](m map[string]N) []KindNum {
	out := make([]KindNum, 0, len(m))
	for k, n := range m {
		if n > 0 {
			out = append(out, KindNum{Kind: k, N: int64(n)})
		}
	}
	slices.SortFunc(out, func(a, b KindNum) int {
		if a.N != b.N {
			return int(b.N - a.N)
		}
		return strings.Compare(a.Kind, b.Kind)
	})
	return out
}

// stages is the window's split along the path: each part's mean over the
// requests split, and its share of their total, largest first.
func stages(ws *windowStats) []Stage {
	out := []Stage{}
	var total int64
	for _, ns := range ws.parts {
		total += ns
	}
	if ws.split == 0 || total <= 0 {
		return out
	}
	for name, ns := range ws.parts {
		if ns > 0 {
			out = append(out, Stage{Name: name, MeanMS: float64(ns) / float64(ws.split) / 1e6, Share: float64(ns) / float64(total)})
		}
	}
	slices.SortFunc(out, func(a, b Stage) int {
		if a.Share != b.Share {
			if a.Share > b.Share {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// sloLines are the objectives, for the charts and tables.
func sloLines(slos []latency.SLO) []SLOLine {
	out := make([]SLOLine, 0, len(slos))
	for _, s := range slos {
		out = append(out, SLOLine{Metric: string(s.Metric), Percentile: s.Percentile, MaxMS: ms(int64(s.Max)), Text: s.String()})
	}
	return out
}

// point is the snapshot's window as one point of the history.
func point(s *Snapshot) Point {
	p := Point{T: s.ElapsedS, Offered: s.Window.OfferedRPS, Achieved: s.Window.AchievedRPS, InFlight: s.InFlight}
	for i, m := range s.Window.Metrics {
		p.P50[i], p.P99[i] = m.P50, m.P99
	}
	if g := s.Gauges; g != nil {
		p.Waiting, p.Running, p.KV = g.Waiting, g.Running, g.KVUsage
	}
	return p
}

func sec(ns int64) float64 { return float64(ns) / 1e9 }
func ms(ns int64) float64  { return float64(ns) / 1e6 }
