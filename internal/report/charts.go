package report

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strings"

	"github.com/tokentrace/tokentrace/internal/chart"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/results"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Chart is one figure of the HTML report: an SVG drawn by gonum.org/v1/plot.
type Chart struct {
	ID      string
	Title   string
	Caption string
	SVG     string // an <svg> element, ready to inline
	Wide    bool   // drawn to span the page's width
}

// Chart sizes: the page shows wide charts across its width and narrow ones
// three to a row, so these keep the text near its drawn size on a laptop.
const (
	wideW, wideH     = 10 * vg.Inch, 3.2 * vg.Inch
	narrowW, narrowH = 4.3 * vg.Inch, 3.2 * vg.Inch
)

// xys converts a curve to plotter's points.
func xys(pts []XY) plotter.XYs {
	out := make(plotter.XYs, len(pts))
	for i, p := range pts {
		out[i] = plotter.XY{X: p.X, Y: p.Y}
	}
	return out
}

// Charts draws the report's figures from the Report alone (its Figures,
// decomposition, phases, SLOs and the server's samples). Figures the run
// has no data for are left out; with an error, those that could be drawn.
func (r *Report) Charts() ([]Chart, error) {
	if r.Summary.Succeeded == 0 {
		return nil, nil
	}
	var out []Chart
	add := func(id, title, caption string, p *plot.Plot, w, h vg.Length) error {
		svg, err := chart.SVG(p, w, h)
		if err != nil {
			return err
		}
		out = append(out, Chart{ID: id, Title: title, Caption: caption, SVG: svg, Wide: w == wideW})
		return nil
	}
	var errs []error
	for _, draw := range []func(addFunc) error{r.cdfCharts, r.timeCharts, r.scatterCharts, r.stageBars, r.sweepCharts, r.tradeoffCharts} {
		if err := draw(add); err != nil {
			errs = append(errs, err) // the other charts are still drawn
		}
	}
	return out, errors.Join(errs...)
}

type addFunc func(id, title, caption string, p *plot.Plot, w, h vg.Length) error

// cdfCharts: the CDFs of TTFT, TPOT and E2E with their SLO thresholds.
func (r *Report) cdfCharts(add addFunc) error {
	for i, c := range r.Figures.CDFs {
		m := string(c.Metric)
		p := chart.New("CDF of "+strings.ToUpper(m), m+" (ms)", "fraction of requests")
		if err := chart.Line(p, "", xys(c.Points), i, false); err != nil {
			return err
		}
		for _, v := range r.SLOs {
			if string(v.Metric) == m {
				thr := v.ThresholdMS
				if err := chart.Line(p, "SLO "+v.SLO, plotter.XYs{{X: thr, Y: 0}, {X: thr, Y: 1}}, 1, true); err != nil {
					return err
				}
			}
		}
		p.Y.Min, p.Y.Max = 0, 1
		p.Legend.Top = false // the curve is high on the right: the legend goes bottom right
		if err := add("cdf-"+m, "CDF of "+strings.ToUpper(m),
			"share of successful requests at or below each latency", p, narrowW, narrowH); err != nil {
			return err
		}
	}
	return nil
}

// timeCharts: latency percentiles and throughput per time bin, and requests
// in flight (the server's running/waiting when scraped).
func (r *Report) timeCharts(add addFunc) error {
	tl := r.Figures.Timeline
	if tl == nil {
		return nil
	}
	p := chart.New("Latency over the run", "time since start (s), by send instant", "ms (log scale)")
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = chart.LogTicks{}
	for i, s := range []struct {
		name string
		pts  []XY
	}{{"TTFT p50", tl.TTFTP50}, {"TTFT p99", tl.TTFTP99}, {"E2E p50", tl.E2EP50}, {"E2E p99", tl.E2EP99}} {
		pts := xys(s.pts)
		for k := range pts {
			pts[k].Y = max(pts[k].Y, 0.001)
		}
		if err := chart.Line(p, s.name, pts, i/2*2+i%2, i%2 == 1); err != nil {
			return err
		}
	}
	tl.axis(p)
	if err := add("latency-time", "Latency over the run", "per time bin: P50 and P99 of requests sent in it",
		p, wideW, wideH); err != nil {
		return err
	}
	p = chart.New("Throughput over the run", "time since start (s), by completion", "output tokens/s")
	if err := chart.Line(p, "output tok/s", xys(tl.OutputTPS), 2, false); err != nil {
		return err
	}
	tl.axis(p)
	if err := add("throughput-time", "Throughput over the run",
		fmt.Sprintf("output tokens per second completed in each %.1f s bin", tl.BinS), p, wideW, wideH); err != nil {
		return err
	}
	if err := r.inflightChart(tl, add); err != nil {
		return err
	}
	return r.serverCharts(tl, add)
}

// axis sets a chart over time to the run's span, so that every such chart
// shares its time axis with the latency chart.
func (tl *Timeline) axis(p *plot.Plot) { p.X.Min, p.X.Max = 0, tl.EndS }

// at is a server sample's instant on the timeline, in seconds.
func (tl *Timeline) at(s results.ServerSample) float64 { return float64(s.AtNS-tl.StartNS) / 1e9 }

// server returns the samples of the run and what they hold (one input:
// the timeline exists only then).
func (r *Report) server() ([]results.ServerSample, *results.ServerInfo) {
	for _, run := range r.Runs {
		if len(run.Samples) > 0 {
			return run.Samples, run.Server
		}
	}
	return nil, nil
}

// serverCharts: the server's KV-cache usage and prefix-cache hits, and its
// preemptions, on the latency chart's time axis (from its /metrics).
func (r *Report) serverCharts(tl *Timeline, add addFunc) error {
	samples, info := r.server()
	if len(samples) == 0 || info == nil {
		return nil
	}
	has := func(f string) bool { return slices.Contains(info.Series, f) }
	if has("kv_cache_usage") || has("prefix_cache") {
		p := chart.New("KV cache over the run", "time since start (s)", "% (0–100)")
		var kv, hits plotter.XYs
		for i, s := range samples {
			kv = append(kv, plotter.XY{X: tl.at(s), Y: 100 * s.KVCacheUsage})
			if i > 0 {
				if dq := s.PrefixQueries - samples[i-1].PrefixQueries; dq > 0 {
					hits = append(hits, plotter.XY{X: tl.at(s), Y: 100 * (s.PrefixHits - samples[i-1].PrefixHits) / dq})
				}
			}
		}
		if has("kv_cache_usage") {
			if err := chart.Line(p, "KV-cache usage", kv, 4, false); err != nil {
				return err
			}
		}
		if has("prefix_cache") {
			if err := chart.Line(p, "prefix-cache hits (% of prompt tokens looked up)", hits, 2, false); err != nil {
				return err
			}
		}
		p.Y.Min, p.Y.Max = 0, 100
		tl.axis(p)
		if err := add("kv-time", "KV cache over the run", "scraped from the server's metrics: blocks in use, and "+
			"the share of prompt tokens its prefix cache served between scrapes", p, wideW, wideH); err != nil {
			return err
		}
	}
	if !has("preemptions") {
		return nil
	}
	p := chart.New("Preemptions over the run", "time since start (s)", "preemptions since the start")
	var pre plotter.XYs
	for _, s := range samples {
		pre = append(pre, plotter.XY{X: tl.at(s), Y: s.Preemptions - samples[0].Preemptions})
	}
	if err := chart.Line(p, "preemptions (server)", pre, 1, false); err != nil {
		return err
	}
	p.Y.Min = 0
	p.Y.Max = max(p.Y.Max, 1)
	tl.axis(p)
	return add("preemptions-time", "Preemptions over the run", "scraped from the server's metrics: requests "+
		"evicted from the KV cache since the run started", p, wideW, wideH)
}

// inflightChart: requests in flight, the server's scrape when there is
// one, else the client's view.
func (r *Report) inflightChart(tl *Timeline, add addFunc) error {
	p := chart.New("Requests in flight", "time since start (s)", "requests")
	samples, _ := r.server()
	caption := "client view: waiting = sent, no token yet; decoding = between first token and end"
	if len(samples) > 0 {
		var run, wait plotter.XYs
		for _, s := range samples {
			run = append(run, plotter.XY{X: tl.at(s), Y: s.Running})
			wait = append(wait, plotter.XY{X: tl.at(s), Y: s.Waiting})
		}
		if err := chart.Line(p, "running (server)", run, 0, false); err != nil {
			return err
		}
		if err := chart.Line(p, "waiting (server)", wait, 1, false); err != nil {
			return err
		}
		caption = "scraped from the server's metrics during the run"
	} else {
		if err := chart.Line(p, "decoding (client view)", xys(tl.Decoding), 0, false); err != nil {
			return err
		}
		if err := chart.Line(p, "waiting for first token", xys(tl.Waiting), 1, false); err != nil {
			return err
		}
	}
	tl.axis(p)
	return add("inflight-time", "Requests in flight", caption, p, wideW, wideH)
}

// scatterCharts: TTFT against input tokens and E2E against output tokens,
// each with its least-squares line.
func (r *Report) scatterCharts(add addFunc) error {
	for _, s := range r.Figures.Scatters {
		p := chart.New(s.Title, s.XLabel, s.YLabel)
		sc, err := plotter.NewScatter(xys(s.Points))
		if err != nil {
			return err
		}
		sc.GlyphStyle.Color = color.RGBA{0x1f, 0x77, 0xb4, 0x90}
		sc.GlyphStyle.Radius = vg.Points(1.6)
		sc.GlyphStyle.Shape = draw.CircleGlyph{}
		p.Add(sc)
		caption := "each dot a request"
		if lo, hi, one := degenerate(s.Points); one {
			// Every request had the same length: a sensible axis around
			// it, not one token either side, and no trend to fit.
			p.X.Min, p.X.Max = lo, hi
			caption = fmt.Sprintf("every request had %s %s, so this shows only the spread of %s at that length",
				num0(s.Points[0].X), strings.ToLower(s.XLabel), strings.TrimSuffix(s.YLabel, " (ms)"))
			if err := add(s.ID, s.Title, caption, p, narrowW, narrowH); err != nil {
				return err
			}
			continue
		}
		if f := s.Fit; f != nil {
			name := fmt.Sprintf("fit: %.3g + %.3g·x (R² %.2f)", f.Intercept, f.Slope, f.R2)
			if err := chart.Line(p, name, plotter.XYs{{X: f.X0, Y: f.Intercept + f.Slope*f.X0}, {X: f.X1, Y: f.Intercept + f.Slope*f.X1}}, 1, false); err != nil {
				return err
			}
			caption += fmt.Sprintf("; least-squares line %.3g ms per token, R² %.2f", f.Slope, f.R2)
		}
		if err := add(s.ID, s.Title, caption, p, narrowW, narrowH); err != nil {
			return err
		}
	}
	return nil
}

// degenerate says whether the points share (about) one x, and the axis
// to draw them on: from 0 to twice it, so the one value sits mid-axis
// with round ticks.
func degenerate(pts []XY) (lo, hi float64, one bool) {
	if len(pts) == 0 {
		return 0, 0, false
	}
	mn, mx := pts[0].X, pts[0].X
	for _, p := range pts {
		mn, mx = min(mn, p.X), max(mx, p.X)
	}
	if mx-mn > max(2, 0.02*math.Abs(mx)) {
		return 0, 0, false
	}
	c := (mn + mx) / 2
	if c <= 0 {
		return c - 1, c + 1, true
	}
	return 0, 2 * c, true
}

// stageBars: the E2E and TTFT decompositions of each group as stacked
// bars, a hop's stages in shades of one colour (the network between hops
// and unattributed time in greys), the legend beside the bars in the
// bars' order, top to bottom; the chart grows with the number of stages.
func (r *Report) stageBars(add addFunc) error {
	for _, d := range []*Decomposition{r.Decomposition, r.TTFTSplit} {
		if d == nil || len(d.Groups) == 0 {
			continue
		}
		title, id := "Where E2E goes: median vs tail", "stages-e2e"
		if d.Of == latency.TTFTIntended {
			title, id = "Where TTFT goes: median vs tail", "stages-ttft"
		}
		p := chart.New(title, "", "mean ms per request")
		var names []string
		for _, g := range d.Groups {
			names = append(names, fmt.Sprintf("%s (n=%d)", g.Name, g.Requests))
		}
		colors := stageColors(d.Groups[0].Stages)
		var below *plotter.BarChart
		type entry struct {
			name string
			bc   *plotter.BarChart
		}
		var legend []entry
		for si, st := range d.Groups[0].Stages {
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
			bc.Color = colors[si]
			bc.LineStyle.Width = 0.3
			bc.LineStyle.Color = color.White
			if below != nil {
				bc.StackOn(below)
			}
			below = bc
			p.Add(bc)
			legend = append(legend, entry{partWords(st), bc})
		}
		for i := len(legend) - 1; i >= 0; i-- {
			p.Legend.Add(legend[i].name, legend[i].bc)
		}
		p.NominalX(names...)
		top := 0.0
		for _, g := range d.Groups {
			var h float64
			for _, st := range g.Stages {
				h += math.Max(st.MeanMS, 0)
			}
			top = max(top, h)
		}
		p.Y.Min, p.Y.Max = 0, 1.05*top
		// The bars take the left part, the legend the right: across the
		// page's width, so its text is read at the size it was drawn.
		p.X.Min, p.X.Max = -0.6, float64(len(d.Groups))+1.4
		p.Legend.Left = false
		p.Legend.Top = false // beside the bars, not above: no headroom taken from them (chart.SVG)
		p.Legend.TextStyle.Font.Size = vg.Points(11)
		h := max(wideH, vg.Length(len(legend))*vg.Points(15)+vg.Inch)
		if err := add(id, title, "mean time in each stage for the median band and the tails, a hop's stages in shades "+
			"of its colour; the tail bars show what the slowest requests spent their time on", p, wideW, h); err != nil {
			return err
		}
	}
	return nil
}

// stageColors gives each part a colour: one hue per hop (the palette's,
// in order of first appearance), lighter for each further stage of the
// hop; grey for the network between hops and for unattributed time.
func stageColors(ss []StageShare) []color.Color {
	hops := map[string]int{}
	seen := map[string]int{}
	out := make([]color.Color, len(ss))
	for i, s := range ss {
		k := seen[s.Hop]
		seen[s.Hop]++
		var base color.RGBA
		switch {
		case s.Hop == "":
			base = color.RGBA{0xb0, 0xb0, 0xb0, 0xff}
		case strings.Contains(s.Hop, "→"):
			base = color.RGBA{0x60, 0x60, 0x60, 0xff}
			k = i % 3
		default:
			h, ok := hops[s.Hop]
			if !ok {
				h = len(hops)
				hops[s.Hop] = h
			}
			base = color.RGBAModel.Convert(chart.Color(h)).(color.RGBA)
		}
		out[i] = tint(base, float64(k%5)*0.17)
	}
	return out
}

// tint mixes c with white: f = 0 is c, 1 white.
func tint(c color.RGBA, f float64) color.Color {
	mix := func(v uint8) uint8 { return uint8(float64(v) + (255-float64(v))*f) }
	return color.RGBA{mix(c.R), mix(c.G), mix(c.B), 0xff}
}

// sweepCharts: per sweep point, latency percentiles and goodput against
// the offered rate, with the SLO thresholds and the capacity point.
func (r *Report) sweepCharts(add addFunc) error {
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
	p := chart.New("Latency vs offered rate", "offered rate (req/s)", "ms (log scale)")
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = chart.LogTicks{}
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
		if err := chart.Line(p, s.name, xys, i, false); err != nil {
			return err
		}
	}
	for i, slo := range r.SLOs {
		if err := chart.HLine(p, "SLO "+slo.SLO, slo.ThresholdMS, x0, x1, 4+i); err != nil {
			return err
		}
		ymax = max(ymax, slo.ThresholdMS)
	}
	if r.Capacity != nil && ymax > 0 {
		if err := chart.Line(p, fmt.Sprintf("capacity %s req/s", num(r.Capacity.RPS)),
			plotter.XYs{{X: r.Capacity.RPS, Y: ymin}, {X: r.Capacity.RPS, Y: ymax}}, 7, true); err != nil {
			return err
		}
	}
	if err := add("sweep-latency", "Latency vs offered rate", "each point one sweep step; dashed: SLO thresholds and the capacity point",
		p, wideW, wideH); err != nil {
		return err
	}
	return r.goodputChart(pts, add)
}

// goodputChart: throughput and goodput against the offered rate.
func (r *Report) goodputChart(pts []Phase, add addFunc) error {
	x0, x1 := pts[0].OfferedRPS, pts[len(pts)-1].OfferedRPS
	p := chart.New("Goodput vs offered rate", "offered rate (req/s)", "req/s")
	var thr, good plotter.XYs
	for _, ph := range pts {
		thr = append(thr, plotter.XY{X: ph.OfferedRPS, Y: ph.ThroughputRPS})
		good = append(good, plotter.XY{X: ph.OfferedRPS, Y: ph.GoodputRPS})
	}
	if err := chart.Line(p, "throughput", thr, 0, false); err != nil {
		return err
	}
	if err := chart.Line(p, "goodput (all SLOs met)", good, 2, false); err != nil {
		return err
	}
	if err := chart.Line(p, "offered", plotter.XYs{{X: x0, Y: x0}, {X: x1, Y: x1}}, 7, true); err != nil {
		return err
	}
	if r.Capacity != nil {
		if err := chart.Line(p, fmt.Sprintf("capacity %s req/s", num(r.Capacity.RPS)),
			plotter.XYs{{X: r.Capacity.RPS, Y: 0}, {X: r.Capacity.RPS, Y: x1}}, 3, true); err != nil {
			return err
		}
	}
	return add("sweep-goodput", "Goodput vs offered rate", "goodput counts requests meeting every SLO",
		p, wideW, wideH)
}
