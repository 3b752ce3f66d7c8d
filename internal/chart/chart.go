package chart

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"regexp"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

var palette = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0xd6, 0x27, 0x28, 0xff},
	color.RGBA{0x2c, 0xa0, 0x2c, 0xff}, color.RGBA{0xff, 0x7f, 0x0e, 0xff},
	color.RGBA{0x94, 0x67, 0xbd, 0xff}, color.RGBA{0x8c, 0x56, 0x4b, 0xff},
	color.RGBA{0xe3, 0x77, 0xc2, 0xff}, color.RGBA{0x7f, 0x7f, 0x7f, 0xff},
	color.RGBA{0xbc, 0xbd, 0x22, 0xff}, color.RGBA{0x17, 0xbe, 0xcf, 0xff},
	color.RGBA{0x39, 0x3b, 0x79, 0xff},
}

// Color is the house palette's i-th series colour.
func Color(i int) color.Color { return palette[i%len(palette)] }

var sans = font.Font{Typeface: "Liberation", Variant: "Sans"}

// Font is the house typeface at size points.
func Font(size vg.Length) font.Font { return font.From(sans, size) }

// New is a plot in the house style: title and axis labels in the page's
// font, round-valued ticks, a grid and a legend in the top corner.
func New(title, x, y string) *plot.Plot {
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

// Line adds a series to p in the house line style — the palette's i-th
// colour, 1.6 pt, dashed when asked — named in the legend unless name is
// "". An empty series adds nothing.
func Line(p *plot.Plot, name string, xys plotter.XYs, i int, dashed bool) error {
	if len(xys) == 0 {
		return nil
	}
	l, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	l.Color = Color(i)
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

// HLine adds a dashed horizontal line at y from x0 to x1 (a threshold).
func HLine(p *plot.Plot, name string, y, x0, x1 float64, i int) error {
	return Line(p, name, plotter.XYs{{X: x0, Y: y}, {X: x1, Y: y}}, i, true)
}

var (
	svgHead   = regexp.MustCompile(`(?s)^.*?<svg width="[^"]*" height="[^"]*"`)
	svgFamily = regexp.MustCompile(`font-family:Liberation (Sans|Serif|Mono)`)
)

// SVG draws p as an <svg class="chart"> element that scales with the page,
// ready to inline.
func SVG(p *plot.Plot, w, h vg.Length) (string, error) {
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

// LogTicks labels a log axis at 1, 2 and 5 times each power of ten (plain
// powers of ten leave a short range with one label).
type LogTicks struct{}

// Ticks implements plot.Ticker.
func (LogTicks) Ticks(lo, hi float64) []plot.Tick {
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
