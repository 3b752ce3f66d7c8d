package report

import (
	"fmt"
	"image/color"
	"math"

	"github.com/tokentrace/tokentrace/internal/chart"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// sweepRun is one sweep drawn on the trade-off charts: a report's phases
// and Pareto, named in the legend when several are overlaid (--compare).
type sweepRun struct {
	name   string
	phases []Phase
	pareto *Pareto
}

// tradeoffCharts: the report's throughput–latency curve and Pareto front.
func (r *Report) tradeoffCharts(add addFunc) error {
	if r.Pareto == nil {
		return nil
	}
	runs := []sweepRun{{phases: r.Phases, pareto: r.Pareto}}
	curve, err := curvePlot(runs, r.SLOs)
	if err != nil {
		return err
	}
	if err := add("sweep-curve", "Latency vs token throughput", curveCaption, curve, wideW, wideH); err != nil {
		return err
	}
	front, err := paretoPlot(runs)
	if err != nil {
		return err
	}
	return add("sweep-pareto", "Pareto front", paretoCaption(r.Pareto), front, wideW, wideH)
}

const curveCaption = "each point one sweep step, by the output tokens/s it achieved; dashed: SLO thresholds; ring: the SLO knee"

func paretoCaption(p *Pareto) string {
	s := "tokens/s each user sees (1 ÷ TPOT p50) against the server's output tokens/s " + p.per() +
		"; line: the Pareto front (no point better on both); ring: the SLO knee"
	if p.Knee == "" {
		s += " (" + p.KneeBasis + ")"
	}
	return s
}

// curveMetric is one latency curve of the throughput–latency chart.
type curveMetric struct {
	name   string
	v      func(Phase) float64
	dashed bool
}

var curveMetrics = []curveMetric{
	{"TTFT p50", func(p Phase) float64 { return p.TTFTP50 }, false},
	{"TTFT p99", func(p Phase) float64 { return p.TTFTP99 }, false},
	{"TPOT p50", func(p Phase) float64 { return p.TPOTP50 }, true},
	{"TPOT p99", func(p Phase) float64 { return p.TPOTP99 }, true},
	{"E2E p99", func(p Phase) float64 { return p.E2EP99 }, false},
}

// curvePlot draws latency percentiles against output tokens/s, one line
// per metric for one run; for several runs TTFT p99 (solid) and TPOT p99
// (dashed) per run, coloured by run.
func curvePlot(runs []sweepRun, slos []Verdict) (*plot.Plot, error) {
	p := chart.New("Latency vs token throughput", "output tokens/s (achieved)", "ms (log scale)")
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = chart.LogTicks{}
	metrics := curveMetrics
	if len(runs) > 1 {
		metrics = []curveMetric{curveMetrics[1], curveMetrics[3]}
	}
	x0, x1 := math.Inf(1), 0.0
	for ri, run := range runs {
		for mi, m := range metrics {
			var pts plotter.XYs
			for _, ph := range run.phases {
				if v := m.v(ph); v > 0 && ph.OutputTPS > 0 {
					pts = append(pts, plotter.XY{X: ph.OutputTPS, Y: v})
					x0, x1 = min(x0, ph.OutputTPS), max(x1, ph.OutputTPS)
				}
			}
			name, colour, dashed := m.name, mi, m.dashed
			if len(runs) > 1 {
				name, colour = run.name+" "+m.name, ri
			}
			if err := chart.Line(p, name, pts, colour, dashed); err != nil {
				return nil, fmt.Errorf("chart %q: %s: %w", p.Title.Text, name, err)
			}
			legend := ""
			if mi == 0 {
				legend = kneeLegend(runs, run)
			}
			if err := ring(p, kneeXY(run, func(ph Phase) (float64, float64) { return ph.OutputTPS, m.v(ph) }), colour, legend); err != nil {
				return nil, fmt.Errorf("chart %q: %s's SLO knee: %w", p.Title.Text, name, err)
			}
		}
	}
	if x1 > x0 { // room for the knee's ring at the edges
		p.X.Min, p.X.Max = x0-0.03*(x1-x0), x1+0.03*(x1-x0)
	}
	for i, slo := range slos {
		if x1 > x0 {
			if err := chart.HLine(p, "SLO "+slo.SLO, slo.ThresholdMS, x0, x1, 5+i); err != nil {
				return nil, fmt.Errorf("chart %q: SLO %s: %w", p.Title.Text, slo.SLO, err)
			}
		}
	}
	return p, nil
}

// paretoPlot draws tokens/s per GPU (or replica) against tokens/s per
// user: every point labelled with its phase, the front joined, the knee
// ringed; one colour per run.
func paretoPlot(runs []sweepRun) (*plot.Plot, error) {
	p := chart.New("Pareto front", "tokens/s per user (1 ÷ TPOT p50)", "output tokens/s "+runs[0].pareto.per())
	x0, x1, y0, y1 := math.Inf(1), 0.0, math.Inf(1), 0.0
	for ri, run := range runs {
		var all, front plotter.XYs
		var labels []string
		for _, q := range run.pareto.Points {
			all = append(all, plotter.XY{X: q.PerUser, Y: q.PerGPU})
			labels = append(labels, q.Phase)
			x0, x1, y0, y1 = min(x0, q.PerUser), max(x1, q.PerUser), min(y0, q.PerGPU), max(y1, q.PerGPU)
		}
		for _, q := range run.pareto.sorted() {
			if q.Front {
				front = append(front, plotter.XY{X: q.PerUser, Y: q.PerGPU})
			}
		}
		name := "Pareto front"
		if len(runs) > 1 {
			name = run.name + " front"
		}
		if err := chart.Line(p, name, front, ri, false); err != nil {
			return nil, fmt.Errorf("chart %q: %s: %w", p.Title.Text, name, err)
		}
		if err := dots(p, all, labels, ri); err != nil {
			return nil, fmt.Errorf("chart %q: %s's points: %w", p.Title.Text, name, err)
		}
		for _, q := range run.pareto.Points {
			if q.Phase != run.pareto.Knee {
				continue
			}
			if err := ring(p, &plotter.XY{X: q.PerUser, Y: q.PerGPU}, ri, kneeLegend(runs, run)); err != nil {
				return nil, fmt.Errorf("chart %q: %s's SLO knee: %w", p.Title.Text, name, err)
			}
		}
	}
	// Room for the labels and rings at the edges.
	if x1 > x0 && y1 > y0 {
		p.X.Min, p.X.Max = x0-0.06*(x1-x0), x1+0.1*(x1-x0)
		p.Y.Min, p.Y.Max = y0-0.08*(y1-y0), y1+0.08*(y1-y0)
	}
	return p, nil
}

// kneeLegend names the knee's ring in the legend.
func kneeLegend(runs []sweepRun, run sweepRun) string {
	if len(runs) > 1 {
		return run.name + " SLO knee (" + run.pareto.Knee + ")"
	}
	return "SLO knee (" + run.pareto.Knee + ")"
}

// kneeXY is the run's knee point in the chart's coordinates, or nil.
func kneeXY(run sweepRun, xy func(Phase) (float64, float64)) *plotter.XY {
	for _, ph := range run.phases {
		if ph.Name == run.pareto.Knee {
			if x, y := xy(ph); x > 0 && y > 0 {
				return &plotter.XY{X: x, Y: y}
			}
		}
	}
	return nil
}

// dots draws the points, each labelled; a point gonum cannot place (NaN
// or infinite) is an error.
func dots(p *plot.Plot, pts plotter.XYs, labels []string, i int) error {
	sc, err := plotter.NewScatter(pts)
	if err != nil {
		return err
	}
	sc.GlyphStyle.Color = chart.Color(i)
	sc.GlyphStyle.Radius = vg.Points(2.6)
	sc.GlyphStyle.Shape = draw.CircleGlyph{}
	p.Add(sc)
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: pts, Labels: labels})
	if err != nil {
		return err
	}
	for k := range l.TextStyle {
		l.TextStyle[k].Font = chart.Font(9)
		l.TextStyle[k].Color = color.RGBA{0x3d, 0x44, 0x52, 0xff}
	}
	l.Offset = vg.Point{X: vg.Points(4), Y: vg.Points(3)}
	p.Add(l)
	return nil
}

// ring circles the SLO knee (none when at is nil), named in the legend
// unless legend is "".
func ring(p *plot.Plot, at *plotter.XY, i int, legend string) error {
	if at == nil {
		return nil
	}
	sc, err := plotter.NewScatter(plotter.XYs{*at})
	if err != nil {
		return err
	}
	sc.GlyphStyle.Color = chart.Color(i)
	sc.GlyphStyle.Radius = vg.Points(6)
	sc.GlyphStyle.Shape = draw.RingGlyph{}
	p.Add(sc)
	if legend != "" {
		p.Legend.Add(legend, sc)
	}
	return nil
}
