package verify

import (
	"html/template"
	"strings"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/tokentrace/tokentrace/internal/chart"
)

// figure is one metric's chart: P50, P95 and P99 measured before, the
// prediction with its 80 % interval, and measured after.
type figure struct {
	Metric string
	SVG    template.HTML
}

// figures draws one chart per latency metric the rows judge.
func (r *Result) figures() ([]figure, error) {
	var out []figure
	for _, m := range Metrics {
		var rows []Row
		for _, x := range r.Rows {
			if x.Metric == string(m) && x.Verdict != NoData {
				rows = append(rows, x)
			}
		}
		if len(rows) == 0 {
			continue
		}
		svg, err := metricChart(strings.ToUpper(string(m)), rows)
		if err != nil {
			return nil, err
		}
		out = append(out, figure{Metric: string(m), SVG: template.HTML(svg)}) // drawn by gonum/plot from our numbers
	}
	return out, nil
}

// metricChart places each percentile at x = 0, 1, 2: before (left),
// predicted with its interval (middle), measured after (right).
func metricChart(name string, rows []Row) (string, error) {
	p := chart.New(name, "percentile", "ms")
	before, pred, after := make(plotter.XYs, len(rows)), make(plotter.XYs, len(rows)), make(plotter.XYs, len(rows))
	errs := make(plotter.YErrors, len(rows))
	labels := make([]string, len(rows))
	for i, x := range rows {
		f := float64(i)
		before[i] = plotter.XY{X: f - 0.2, Y: x.Before}
		pred[i] = plotter.XY{X: f, Y: x.Predicted}
		after[i] = plotter.XY{X: f + 0.2, Y: x.Measured}
		errs[i].Low, errs[i].High = x.Predicted-x.Low, x.High-x.Predicted
		labels[i] = strings.ToUpper(x.Stat)
	}
	bars, err := plotter.NewYErrorBars(struct {
		plotter.XYs
		plotter.YErrors
	}{pred, errs})
	if err != nil {
		return "", err
	}
	bars.Color = chart.Color(0)
	p.Add(bars)
	for _, s := range []struct {
		name  string
		xys   plotter.XYs
		color int
		shape draw.GlyphDrawer
	}{{"before", before, 7, draw.CircleGlyph{}}, {"predicted (80 % interval)", pred, 0, draw.BoxGlyph{}}, {"after", after, 1, draw.CrossGlyph{}}} {
		sc, err := plotter.NewScatter(s.xys)
		if err != nil {
			return "", err
		}
		sc.GlyphStyle.Color, sc.GlyphStyle.Shape, sc.GlyphStyle.Radius = chart.Color(s.color), s.shape, vg.Points(3.5)
		p.Add(sc)
		p.Legend.Add(s.name, sc)
	}
	p.NominalX(labels...)
	p.X.Min, p.X.Max = -0.5, float64(len(rows))-0.5
	p.Y.Min = 0
	return chart.SVG(p, 3.4*vg.Inch, 2.6*vg.Inch)
}
