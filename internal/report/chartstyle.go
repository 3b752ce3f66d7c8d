package report

import (
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
)

// NewPlot is a plot in the report's style (fonts, grid, legend, ticks),
// for other commands' HTML pages to match the report's.
func NewPlot(title, x, y string) *plot.Plot { return newPlot(title, x, y) }

// RenderSVG draws p as an <svg class="chart"> element, ready to inline, as
// the report draws its charts.
func RenderSVG(p *plot.Plot, w, h vg.Length) (string, error) { return render(p, w, h) }

// ChartColor is the report's i-th series colour.
func ChartColor(i int) color.Color { return palette[i%len(palette)] }
