package report

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/stats"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Chart is one figure of the HTML report: an SVG drawn by gonum.org/v1/plot.
type Chart struct {
	ID      string
	Title   string
	Caption string
	SVG     string // an <svg> element, ready to inline
	Wide    bool   // drawn to span the page's width
}

var palette = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0xd6, 0x27, 0x28, 0xff},
	color.RGBA{0x2c, 0xa0, 0x2c, 0xff}, color.RGBA{0xff, 0x7f, 0x0e, 0xff},
	color.RGBA{0x94, 0x67, 0xbd, 0xff}, color.RGBA{0x8c, 0x56, 0x4b, 0xff},
	color.RGBA{0xe3, 0x77, 0xc2, 0xff}, color.RGBA{0x7f, 0x7f, 0x7f, 0xff},
	color.RGBA{0xbc, 0xbd, 0x22, 0xff}, color.RGBA{0x17, 0xbe, 0xcf, 0xff},
	color.RGBA{0x39, 0x3b, 0x79, 0xff},
}

var sans = font.Font{Typeface: "Liberation", Variant: "Sans"}

// Chart sizes: the page shows wide charts across its width and narrow ones
// three to a row, so these keep the text near its drawn size on a laptop.
const (
	wideW, wideH     = 10 * vg.Inch, 3.2 * vg.Inch
	narrowW, narrowH = 4.3 * vg.Inch, 3.2 * vg.Inch
)

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font = font.From(sans, 13)
	p.X.Label.Text, p.Y.Label.Text = x, y
	for _, ax := range []*plot.Axis{&p.X, &p.Y} {
		ax.Label.TextStyle.Font = font.From(sans, 11)
		ax.Tick.Label.Font = font.From(sans, 10)
		ax.Tick.Marker = niceTicks{}
	}
	p.Legend.TextStyle.Font = font.From(sans, 10)
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p
}

var (
	svgHead   = regexp.MustCompile(`(?s)^.*?<svg width="[^"]*" height="[^"]*"`)
	svgFamily = regexp.MustCompile(`font-family:Liberation (Sans|Serif|Mono)`)
)

// render draws a plot to an inline SVG element that scales with the page.
func render(p *plot.Plot, w, h vg.Length) (string, error) {
	// Leave room above the data for a legend in the top corner: stretch the
	// Y axis by the share of the plot's height the legend takes.
	if p.Legend.Top && !math.IsNaN(p.Y.Max) && !math.IsInf(p.Y.Max, 0) && p.Y.Max > p.Y.Min {
		lh := p.Legend.Rectangle(draw.New(vgsvg.New(w, h))).Size().Y
		f := min(float64(lh+vg.Points(6))/float64(h-vg.Points(70)), 0.6)
		if _, log := p.Y.Scale.(plot.LogScale); log && p.Y.Min > 0 {
			lo, hi := math.Log10(p.Y.Min), math.Log10(p.Y.Max)
			p.Y.Max = math.Pow(10, lo+(hi-lo)/(1-f))
		} else {
			p.Y.Max = p.Y.Min + (p.Y.Max-p.Y.Min)/(1-f)
		}
	}
	c := vgsvg.New(w, h)
	p.Draw(draw.New(c))
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return "", fmt.Errorf("chart %q: %w", p.Title.Text, err)
	}
	s := svgHead.ReplaceAllString(b.String(), `<svg class="chart" role="img"`)
	s = svgFamily.ReplaceAllString(s, `font-family:'Liberation $1',Arial,Helvetica,sans-serif`)
	return s, nil
}

func line(p *plot.Plot, name string, xys plotter.XYs, i int, dashed bool) error {
	if len(xys) == 0 {
		return nil
	}
	l, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	l.Color = palette[i%len(palette)]
	l.Width = vg.Points(1.6)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	}
	p.Add(l)
	if name != "" {
		p.Legend.Add(name, l)
	}
	return nil
}

func hline(p *plot.Plot, name string, y, x0, x1 float64, i int) error {
	return line(p, name, plotter.XYs{{X: x0, Y: y}, {X: x1, Y: y}}, i, true)
}

// logTicks labels a log axis at 1, 2 and 5 times each power of ten (plain
// powers of ten leave a short range with one label).
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= lo {
		return nil
	}
	var out []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v < lo || v > hi {
				continue
			}
			label := strconv.FormatFloat(v, 'f', -1, 64)
			if v >= 1e4 {
				label = strconv.FormatFloat(v/1000, 'f', -1, 64) + "k"
			}
			out = append(out, plot.Tick{Value: v, Label: label})
		}
	}
	return out
}

// niceTicks labels a linear axis at about five round values (1, 2 or 5
// times a power of ten), with unlabelled minor ticks between them.
type niceTicks struct{}

func (niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return nil
	}
	raw := (hi - lo) / 6
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		out = append(out, plot.Tick{Value: v, Label: tickLabel(v, step)})
		for k := 1; k < 5; k++ {
			if m := v + float64(k)*step/5; m <= hi {
				out = append(out, plot.Tick{Value: m})
			}
		}
	}
	return out
}

func tickLabel(v, step float64) string {
	if math.Abs(v) < step*1e-9 {
		return "0"
	}
	if math.Abs(v) >= 1e4 && math.Mod(v, 1000) == 0 {
		return strconv.FormatFloat(v/1000, 'f', -1, 64) + "k"
	}
	prec := max(0, int(-math.Floor(math.Log10(step))))
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// cdfPoints samples an ascending sample's empirical CDF at up to k points.
func cdfPoints(sorted []int64, k int) plotter.XYs {
	n := len(sorted)
	if n == 0 {
		return nil
	}
	step := max(1, n/k)
	var xys plotter.XYs
	for i := 0; i < n; i += step {
		xys = append(xys, plotter.XY{X: ms(sorted[i]), Y: float64(i+1) / float64(n)})
	}
	xys = append(xys, plotter.XY{X: ms(sorted[n-1]), Y: 1})
	return xys
}

// Charts draws the report's figures. Figures the run has no data for are left out.
func (r *Report) Charts() ([]Chart, error) {
	a := r.a
	if a == nil || len(a.ok) == 0 {
		return nil, nil
	}
	var out []Chart
	add := func(id, title, caption string, p *plot.Plot, w, h vg.Length) error {
		svg, err := render(p, w, h)
		if err != nil {
			return err
		}
		out = append(out, Chart{ID: id, Title: title, Caption: caption, SVG: svg, Wide: w == wideW})
		return nil
	}
	// CDFs.
	for i, m := range []latency.Metric{latency.TTFT, latency.TPOT, latency.E2E} {
		s := a.sample(string(m))
		if len(s) == 0 {
			continue
		}
		p := newPlot("CDF of "+strings.ToUpper(string(m)), string(m)+" (ms)", "fraction of requests")
		if err := line(p, "", cdfPoints(s, 400), i, false); err != nil {
			return nil, err
		}
		for _, slo := range a.opts.SLOs {
			if slo.Metric == m {
				thr := ms(int64(slo.Max))
				if err := line(p, "SLO "+slo.String(), plotter.XYs{{X: thr, Y: 0}, {X: thr, Y: 1}}, 1, true); err != nil {
					return nil, err
				}
			}
		}
		p.Y.Min, p.Y.Max = 0, 1
		p.Legend.Top = false // the curve is high on the right: the legend goes bottom right
		if err := add("cdf-"+string(m), "CDF of "+strings.ToUpper(string(m)),
			"share of successful requests at or below each latency", p, narrowW, narrowH); err != nil {
			return nil, err
		}
	}
	if err := a.timeCharts(r, add); err != nil {
		return nil, err
	}
	if err := a.scatterCharts(add); err != nil {
		return nil, err
	}
	if err := stageBars(r, add); err != nil {
		return nil, err
	}
	if err := sweepCharts(r, add); err != nil {
		return nil, err
	}
	return out, nil
}

type addFunc func(id, title, caption string, p *plot.Plot, w, h vg.Length) error

// timeCharts: latency percentiles and throughput per time bin, and requests
// in flight (the server's running/waiting when scraped).
func (a *analysis) timeCharts(r *Report, add addFunc) error {
	var t0, t1 int64 = math.MaxInt64, math.MinInt64
	for _, i := range a.ok {
		row := &a.rows[i]
		t0, t1 = min(t0, row.intended), max(t1, row.end)
	}
	if len(a.sources) > 1 || t1 <= t0 {
		return nil // instants of different runs do not share a clock
	}
	nb := int(min(max((t1-t0)/1e9, 30), 120))
	width := float64(t1-t0) / float64(nb)
	bin := func(t int64) int { return min(max(int(float64(t-t0)/width), 0), nb-1) }
	ttft := make([][]int64, nb)
	e2e := make([][]int64, nb)
	outTok := make([]float64, nb)
	done := make([]float64, nb)
	for _, i := range a.ok {
		row := &a.rows[i]
		b := bin(row.sent)
		if row.firstTok > 0 {
			ttft[b] = append(ttft[b], row.firstTok-row.sent)
		}
		e2e[b] = append(e2e[b], row.end-row.sent)
		outTok[bin(row.end)] += float64(row.output)
		done[bin(row.end)]++
	}
	mid := func(b int) float64 { return (float64(b) + 0.5) * width / 1e9 }
	var series [4]plotter.XYs
	for b := 0; b < nb; b++ {
		slices.Sort(ttft[b])
		slices.Sort(e2e[b])
		if len(ttft[b]) > 0 {
			series[0] = append(series[0], plotter.XY{X: mid(b), Y: ms(stats.Percentile(ttft[b], 50))})
			series[1] = append(series[1], plotter.XY{X: mid(b), Y: ms(stats.Percentile(ttft[b], 99))})
		}
		if len(e2e[b]) > 0 {
			series[2] = append(series[2], plotter.XY{X: mid(b), Y: ms(stats.Percentile(e2e[b], 50))})
			series[3] = append(series[3], plotter.XY{X: mid(b), Y: ms(stats.Percentile(e2e[b], 99))})
		}
	}
	p := newPlot("Latency over the run", "time since start (s), by send instant", "ms (log scale)")
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = logTicks{}
	for i, name := range []string{"TTFT p50", "TTFT p99", "E2E p50", "E2E p99"} {
		for k := range series[i] {
			series[i][k].Y = max(series[i][k].Y, 0.001)
		}
		if err := line(p, name, series[i], i/2*2+i%2, i%2 == 1); err != nil {
			return err
		}
	}
	if err := add("latency-time", "Latency over the run", "per time bin: P50 and P99 of requests sent in it",
		p, wideW, wideH); err != nil {
		return err
	}
	p = newPlot("Throughput over the run", "time since start (s), by completion", "output tokens/s")
	var tok, req plotter.XYs
	for b := 0; b < nb; b++ {
		tok = append(tok, plotter.XY{X: mid(b), Y: outTok[b] / (width / 1e9)})
		req = append(req, plotter.XY{X: mid(b), Y: done[b] / (width / 1e9)})
	}
	if err := line(p, "output tok/s", tok, 2, false); err != nil {
		return err
	}
	if err := add("throughput-time", "Throughput over the run",
		fmt.Sprintf("output tokens per second completed in each %.1f s bin", width/1e9), p, wideW, wideH); err != nil {
		return err
	}
	// Requests in flight: the server's scrape when there is one, else the client's view.
	p = newPlot("Requests in flight", "time since start (s)", "requests")
	var samples []ServerSample
	for _, run := range a.runs {
		samples = append(samples, run.Samples...)
	}
	caption := "client view: waiting = sent, no token yet; decoding = between first token and end"
	if len(samples) > 0 {
		var run, wait plotter.XYs
		for _, s := range samples {
			run = append(run, plotter.XY{X: float64(s.AtNS) / 1e9, Y: s.Running})
			wait = append(wait, plotter.XY{X: float64(s.AtNS) / 1e9, Y: s.Waiting})
		}
		if err := line(p, "running (server)", run, 0, false); err != nil {
			return err
		}
		if err := line(p, "waiting (server)", wait, 1, false); err != nil {
			return err
		}
		caption = "scraped from the server's metrics during the run"
	} else {
		waiting := make([]float64, nb)
		decoding := make([]float64, nb)
		for _, i := range a.ok {
			row := &a.rows[i]
			first := row.firstTok
			if first == 0 {
				first = row.end
			}
			// Time-average over each bin of the requests in each state.
			accum(waiting, row.sent, first, t0, width)
			accum(decoding, first, row.end, t0, width)
		}
		var w, d plotter.XYs
		for b := 0; b < nb; b++ {
			w = append(w, plotter.XY{X: mid(b), Y: waiting[b]})
			d = append(d, plotter.XY{X: mid(b), Y: decoding[b]})
		}
		if err := line(p, "decoding (client view)", d, 0, false); err != nil {
			return err
		}
		if err := line(p, "waiting for first token", w, 1, false); err != nil {
			return err
		}
	}
	return add("inflight-time", "Requests in flight", caption, p, wideW, wideH)
}

// accum adds the interval [lo, hi) to per-bin time averages.
func accum(bins []float64, lo, hi, t0 int64, width float64) {
	if hi <= lo {
		return
	}
	for b := max(int(float64(lo-t0)/width), 0); b < len(bins); b++ {
		bl := float64(t0) + float64(b)*width
		br := bl + width
		if bl >= float64(hi) {
			break
		}
		ov := math.Min(br, float64(hi)) - math.Max(bl, float64(lo))
		if ov > 0 {
			bins[b] += ov / width
		}
	}
}

// scatterCharts: TTFT against input tokens and E2E against output tokens,
// each with its least-squares line.
func (a *analysis) scatterCharts(add addFunc) error {
	type spec struct {
		id, title, x, y string
		xv              func(*row) float64
		metric          string // y: the request's value of this metric
	}
	specs := []spec{
		{"ttft-input", "TTFT vs input tokens", "input tokens", "TTFT (ms)",
			func(r *row) float64 { return float64(r.input) }, "ttft"},
		{"e2e-output", "E2E vs output tokens", "output tokens", "E2E (ms)",
			func(r *row) float64 { return float64(r.output) }, "e2e"},
	}
	for _, s := range specs {
		var xs, ys []float64
		for _, i := range a.ok {
			row := &a.rows[i]
			if y, ok := metricValue(row, s.metric); ok {
				xs, ys = append(xs, s.xv(row)), append(ys, ms(y))
			}
		}
		if len(xs) == 0 {
			continue
		}
		step := max(1, len(xs)/3000) // draw at most ~3,000 points; the fit uses all
		var pts plotter.XYs
		for i := 0; i < len(xs); i += step {
			pts = append(pts, plotter.XY{X: xs[i], Y: ys[i]})
		}
		p := newPlot(s.title, s.x, s.y)
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		sc.GlyphStyle.Color = color.RGBA{0x1f, 0x77, 0xb4, 0x90}
		sc.GlyphStyle.Radius = vg.Points(1.6)
		sc.GlyphStyle.Shape = draw.CircleGlyph{}
		p.Add(sc)
		caption := "each dot a request"
		if f, ok := linearFit(xs, ys); ok {
			x0, x1 := slices.Min(xs), slices.Max(xs)
			name := fmt.Sprintf("fit: %.3g + %.3g·x (R² %.2f)", f.Intercept, f.Slope, f.R2)
			if err := line(p, name, plotter.XYs{{X: x0, Y: f.Intercept + f.Slope*x0}, {X: x1, Y: f.Intercept + f.Slope*x1}}, 1, false); err != nil {
				return err
			}
			caption += fmt.Sprintf("; least-squares line %.3g ms per token, R² %.2f", f.Slope, f.R2)
		}
		if err := add(s.id, s.title, caption, p, narrowW, narrowH); err != nil {
			return err
		}
	}
	return nil
}

// stageBars: the E2E decomposition of each group as stacked bars.
func stageBars(r *Report, add addFunc) error {
	for _, d := range []*Decomposition{r.Decomposition, r.TTFTSplit} {
		if d == nil || len(d.Groups) == 0 {
			continue
		}
		title, id := "Where E2E goes: median vs tail", "stages-e2e"
		if d.Of == "ttft_intended" {
			title, id = "Where TTFT goes: median vs tail", "stages-ttft"
		}
		p := newPlot(title, "", "mean ms per request")
		var names []string
		for _, g := range d.Groups {
			names = append(names, fmt.Sprintf("%s (n=%d)", g.Name, g.Requests))
		}
		var below *plotter.BarChart
		for si := range d.Groups[0].Stages {
			vals := make(plotter.Values, len(d.Groups))
			any := false
			for gi, g := range d.Groups {
				vals[gi] = math.Max(g.Stages[si].MeanMS, 0)
				any = any || vals[gi] > 0
			}
			if !any {
				continue
			}
			bc, err := plotter.NewBarChart(vals, vg.Points(48))
			if err != nil {
				return err
			}
			bc.Color = palette[si%len(palette)]
			bc.LineStyle.Width = 0
			if below != nil {
				bc.StackOn(below)
			}
			below = bc
			p.Add(bc)
			p.Legend.Add(d.Groups[0].Stages[si].Stage, bc)
		}
		p.NominalX(names...)
		p.Legend.Left = true
		if err := add(id, title, "mean time in each stage for the median band and the tails; "+
			"the tail bars show what the slowest requests spent their time on", p, narrowW, narrowH); err != nil {
			return err
		}
	}
	return nil
}

// sweepCharts: per sweep point, latency percentiles and goodput against
// the offered rate, with the SLO thresholds and the capacity point.
func sweepCharts(r *Report, add addFunc) error {
	var pts []Phase
	for _, ph := range r.Phases {
		if ph.OfferedRPS > 0 {
			pts = append(pts, ph)
		}
	}
	if len(pts) < 2 {
		return nil
	}
	x0, x1 := pts[0].OfferedRPS, pts[len(pts)-1].OfferedRPS
	p := newPlot("Latency vs offered rate", "offered rate (req/s)", "ms (log scale)")
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = logTicks{}
	series := []struct {
		name string
		v    func(Phase) float64
	}{
		{"TTFT p50", func(p Phase) float64 { return p.TTFTP50 }}, {"TTFT p99", func(p Phase) float64 { return p.TTFTP99 }},
		{"TPOT p99", func(p Phase) float64 { return p.TPOTP99 }}, {"E2E p99", func(p Phase) float64 { return p.E2EP99 }},
	}
	ymin, ymax := math.Inf(1), 0.0
	for i, s := range series {
		var xys plotter.XYs
		for _, ph := range pts {
			if v := s.v(ph); v > 0 {
				xys = append(xys, plotter.XY{X: ph.OfferedRPS, Y: v})
				ymin, ymax = min(ymin, v), max(ymax, v)
			}
		}
		if err := line(p, s.name, xys, i, false); err != nil {
			return err
		}
	}
	for i, slo := range r.SLOs {
		if err := hline(p, "SLO "+slo.SLO, slo.ThresholdMS, x0, x1, 4+i); err != nil {
			return err
		}
		ymax = max(ymax, slo.ThresholdMS)
	}
	if r.Capacity != nil && ymax > 0 {
		if err := line(p, fmt.Sprintf("capacity %s req/s", num(r.Capacity.RPS)),
			plotter.XYs{{X: r.Capacity.RPS, Y: ymin}, {X: r.Capacity.RPS, Y: ymax}}, 7, true); err != nil {
			return err
		}
	}
	if err := add("sweep-latency", "Latency vs offered rate", "each point one sweep step; dashed: SLO thresholds and the capacity point",
		p, wideW, wideH); err != nil {
		return err
	}
	p = newPlot("Goodput vs offered rate", "offered rate (req/s)", "req/s")
	var thr, good plotter.XYs
	for _, ph := range pts {
		thr = append(thr, plotter.XY{X: ph.OfferedRPS, Y: ph.ThroughputRPS})
		good = append(good, plotter.XY{X: ph.OfferedRPS, Y: ph.GoodputRPS})
	}
	if err := line(p, "throughput", thr, 0, false); err != nil {
		return err
	}
	if err := line(p, "goodput (all SLOs met)", good, 2, false); err != nil {
		return err
	}
	if err := line(p, "offered", plotter.XYs{{X: x0, Y: x0}, {X: x1, Y: x1}}, 7, true); err != nil {
		return err
	}
	if r.Capacity != nil {
		if err := line(p, fmt.Sprintf("capacity %s req/s", num(r.Capacity.RPS)),
			plotter.XYs{{X: r.Capacity.RPS, Y: 0}, {X: r.Capacity.RPS, Y: x1}}, 3, true); err != nil {
			return err
		}
	}
	return add("sweep-goodput", "Goodput vs offered rate", "goodput counts requests meeting every SLO",
		p, wideW, wideH)
}
