package report

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// The tail-phase rule's thresholds (docs/report.md, "tail-phase").
const (
	phaseMinValues = 5       // a window counts with at least this many values of the metric
	phaseMinWins   = 2       // windows inside the phase, and outside it, at least
	phaseRatio     = 2.0     // the phase's median P99 over the rest's, at least
	phaseEach      = 1.5     // every window inside at least this × the rest's median P99, every one outside under it
	phaseFloorMS   = 5.0     // the rise in ms, at least
	phaseMaxShare  = 2.0 / 3 // of the windows with values, at most: a phase, not the run
)

// tailPhase is a run of windows whose P99 of one metric stands above the
// rest of the run's.
type tailPhase struct {
	metric         latency.Metric
	first, last    int     // window indices in TimeSeries.Windows
	startS, endS   float64 // the phase's span
	before, during float64 // median P99 outside and inside, ms
	atEnd          bool    // the phase lasts to the run's end
}

// ruleTailPhase: a latency tail that appears in one phase of the run only,
// named with its time (a queue that builds at minute three, a burst of
// long prompts). Not for a sweep, whose phases differ by design.
func ruleTailPhase(a *analysis, rep *Report) (Finding, bool) {
	ts := rep.TimeSeries
	if ts == nil || len(rep.Phases) > 0 {
		return Finding{}, false
	}
	var best *tailPhase
	var why string
	for _, m := range []latency.Metric{latency.TTFT, latency.TPOT, latency.ITL, latency.E2E} {
		w, ok := concern(rep, m)
		if !ok {
			continue
		}
		if p, ok := findTailPhase(ts, m); ok && (best == nil || p.during/p.before > best.during/best.before) {
			best, why = &p, w
		}
	}
	if best == nil {
		return Finding{}, false
	}
	name := strings.ToUpper(string(best.metric))
	when := fmt.Sprintf("between %s and %s", clock(best.startS), clock(best.endS))
	rose := fmt.Sprintf("%s P99 rose from %s to %s %s", name, fmtMS(best.before), fmtMS(best.during), when)
	if best.first == 0 {
		rose = fmt.Sprintf("%s P99 was %s %s and fell to %s after", name, fmtMS(best.during), when, fmtMS(best.before))
	} else if best.atEnd {
		rose = fmt.Sprintf("%s P99 rose from %s to %s from %s to the end of the run (%s)", name, fmtMS(best.before),
			fmtMS(best.during), clock(best.startS), clock(best.endS))
	}
	ev := fmt.Sprintf("%s%s: the median of the P99s of the %d windows of %s in that phase, against that of the "+
		"other windows of the run; every window in it is at least %.1f× the rest, none outside is. The tail is "+
		"not the run's steady state: something changed at %s.%s", prefix(why), rose, best.last-best.first+1,
		fmtS(ts.WidthS), phaseEach, clock(best.startS), phaseContext(ts, best))
	return Finding{Severity: SeverityWarning, Title: fmt.Sprintf("%s's tail appears only %s", name, when), Evidence: ev,
		Numbers: map[string]float64{"phase_start_s": best.startS, "phase_end_s": best.endS, "before_p99_ms": best.before,
			"during_p99_ms": best.during, "window_s": ts.WidthS},
		Remedies: []string{
			fmt.Sprintf("look at what the phase holds: the requests completed %s (report --format csv, by sent_ms) and "+
				"the server's gauges in the time series (report --format series-csv)", when),
			"judge the SLO on runs of one steady load (a phase per run), or long enough to hold the phase many times"}}, true
}

// findTailPhase looks for the phase of one metric (longest first, then
// the largest rise).
func findTailPhase(ts *TimeSeries, m latency.Metric) (tailPhase, bool) {
	var idx []int // windows with enough values
	var p99 []float64
	for k := range ts.Windows {
		if d := ts.Windows[k].dist(m); d.Count >= phaseMinValues {
			idx, p99 = append(idx, k), append(p99, d.P99)
		}
	}
	var best tailPhase
	found := false
	for i := range idx {
		for j := i + phaseMinWins - 1; j < len(idx); j++ {
			if len(idx)-(j-i+1) < phaseMinWins || float64(j-i+1) > phaseMaxShare*float64(len(idx)) {
				break
			}
			in := p99[i : j+1]
			out := slices.Concat(p99[:i], p99[j+1:])
			x, y := medianOf(out), medianOf(in)
			if y < phaseRatio*x || y-x < phaseFloorMS || slices.Min(in) < phaseEach*x || slices.Max(out) >= phaseEach*x {
				continue
			}
			c := tailPhase{metric: m, first: idx[i], last: idx[j], startS: ts.Windows[idx[i]].StartS,
				endS: ts.Windows[idx[j]].EndS, before: x, during: y, atEnd: j == len(idx)-1}
			if !found || c.last-c.first > best.last-best.first ||
				c.last-c.first == best.last-best.first && c.during/c.before > best.during/best.before {
				best, found = c, true
			}
		}
	}
	return best, found
}

// medianOf is the nearest-rank median of xs (not modified).
func medianOf(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[(len(s)+1)/2-1]
}

// dist is the window's distribution of m.
func (p *SeriesPoint) dist(m latency.Metric) WindowDist {
	switch m {
	case latency.TTFT:
		return p.TTFT
	case latency.TPOT:
		return p.TPOT
	case latency.ITL:
		return p.ITL
	}
	return p.E2E
}

// phaseContext says what else the windows show in the phase: the rate and
// requests in flight, and the server's queue, against the rest.
func phaseContext(ts *TimeSeries, ph *tailPhase) string {
	var in, out [3]float64
	var nIn, nOut, gIn, gOut float64
	for k := range ts.Windows {
		w := &ts.Windows[k]
		v := [3]float64{w.OfferedRPS, w.InFlight, 0}
		inside := k >= ph.first && k <= ph.last
		g := w.Waiting != nil
		if g {
			v[2] = *w.Waiting
		}
		if inside {
			nIn++
			in[0], in[1] = in[0]+v[0], in[1]+v[1]
			if g {
				in[2], gIn = in[2]+v[2], gIn+1
			}
		} else {
			nOut++
			out[0], out[1] = out[0]+v[0], out[1]+v[1]
			if g {
				out[2], gOut = out[2]+v[2], gOut+1
			}
		}
	}
	if nOut == 0 {
		return ""
	}
	s := fmt.Sprintf(" In the phase the offered rate averaged %s req/s and requests in flight %s, against %s and %s outside it",
		num(in[0]/nIn), num(in[1]/nIn), num(out[0]/nOut), num(out[1]/nOut))
	if gIn > 0 && gOut > 0 {
		s += fmt.Sprintf("; the server's waiting requests %s against %s", num(in[2]/gIn), num(out[2]/gOut))
	}
	return s + "."
}

// clock words seconds since the run's start as m:ss (h:mm:ss past an hour).
func clock(s float64) string {
	t := int(math.Round(s))
	if t >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", t/3600, t/60%60, t%60)
	}
	return fmt.Sprintf("%d:%02d", t/60, t%60)
}

// markTailPhase draws the tail-phase finding's span on a chart over time,
// as two dashed grey lines.
func (r *Report) markTailPhase(p *plot.Plot) {
	i := slices.IndexFunc(r.Findings, func(f Finding) bool { return f.Rule == RuleTailPhase })
	if i < 0 {
		return
	}
	f := r.Findings[i]
	lo, hi := p.Y.Min, p.Y.Max
	for k, x := range []float64{f.Numbers["phase_start_s"], f.Numbers["phase_end_s"]} {
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: lo}, {X: x, Y: hi}})
		if err != nil {
			return
		}
		l.Color = color.Gray{Y: 0x70}
		l.Width = vg.Points(1.2)
		l.Dashes = []vg.Length{vg.Points(2), vg.Points(3)}
		p.Add(l)
		if k == 0 {
			p.Legend.Add("tail phase (diagnosis)", l)
		}
	}
}
