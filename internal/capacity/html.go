package capacity

import (
	"fmt"
	"html/template"
	"image/color"
	"io"
	"math"
	"slices"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/tokentrace/tokentrace/internal/chart"
	"github.com/tokentrace/tokentrace/internal/engine"
)

// figure is one inline SVG figure of the HTML page.
type figure struct {
	Title, Caption string
	SVG            template.HTML
}

// Charts draws the plan's two figures: goodput against cost and latency
// against cost, every candidate whose goodput is known as a grey dot, the
// Pareto front as a line, the answer as a large dot.
func (pl *Plan) charts() ([]figure, error) {
	target := pl.Objective.TargetRate > 0
	var all, frontG, frontL, allL plotter.XYs
	for _, c := range pl.Candidates {
		if c.Status == Duplicate || c.GoodputRate() <= 0 {
			continue
		}
		all = append(all, plotter.XY{X: c.USDPerHour, Y: c.GoodputRate()})
		if l := c.Latency(target); l != Unbounded {
			allL = append(allL, plotter.XY{X: c.USDPerHour, Y: float64(l) / 1e6})
		}
	}
	for _, c := range pl.Front {
		frontG = append(frontG, plotter.XY{X: c.USDPerHour, Y: c.GoodputRate()})
		if l := c.Latency(target); l != Unbounded {
			frontL = append(frontL, plotter.XY{X: c.USDPerHour, Y: float64(l) / 1e6})
		}
	}
	if len(all) == 0 {
		return nil, nil
	}
	var best, bestL plotter.XYs
	if c := pl.Best; c != nil {
		best = plotter.XYs{{X: c.USDPerHour, Y: c.GoodputRate()}}
		if l := c.Latency(target); l != Unbounded {
			bestL = plotter.XYs{{X: c.USDPerHour, Y: float64(l) / 1e6}}
		}
	}
	g, err := scatterChart("Goodput against cost", "$ per hour", "goodput (req/s)", all, frontG, best, math.NaN())
	if err != nil {
		return nil, err
	}
	s := pl.Objective.SLOs[0]
	l, err := scatterChart("Latency against cost", "$ per hour", pl.latencyName()+" (ms)", allL, frontL, bestL, float64(s.Max)/1e6)
	if err != nil {
		return nil, err
	}
	return []figure{
		{Title: "Goodput against cost", Caption: "each grey dot a candidate that meets the SLOs at some rate; line: the Pareto front; large dot: the answer", SVG: g},
		{Title: "Latency against cost", Caption: fmt.Sprintf("%s; dashed: the SLO threshold %s", pl.latencyName(), s), SVG: l},
	}, nil
}

// scatterChart draws all as dots, front as a line with dots, best as a
// large dot, and a dashed threshold when it is a number.
func scatterChart(title, x, y string, all, front, best plotter.XYs, threshold float64) (template.HTML, error) {
	p := chart.New(title, x, y)
	dots := func(xys plotter.XYs, c color.Color, r vg.Length, name string) error {
		if len(xys) == 0 {
			return nil
		}
		sc, err := plotter.NewScatter(xys)
		if err != nil {
			return err
		}
		sc.GlyphStyle.Color, sc.GlyphStyle.Radius, sc.GlyphStyle.Shape = c, r, draw.CircleGlyph{}
		p.Add(sc)
		if name != "" {
			p.Legend.Add(name, sc)
		}
		return nil
	}
	if err := dots(all, color.RGBA{0x7f, 0x7f, 0x7f, 0x90}, vg.Points(2.2), "candidates"); err != nil {
		return "", err
	}
	if len(front) > 0 {
		if err := chart.Line(p, "Pareto front", front, 0, false); err != nil {
			return "", err
		}
		if err := dots(front, chart.Color(0), vg.Points(2.6), ""); err != nil {
			return "", err
		}
	}
	if err := dots(best, chart.Color(1), vg.Points(5), "answer"); err != nil {
		return "", err
	}
	if !math.IsNaN(threshold) {
		lo, hi := all[0].X, all[0].X
		for _, v := range all {
			lo, hi = min(lo, v.X), max(hi, v.X)
		}
		ln, err := plotter.NewLine(plotter.XYs{{X: lo, Y: threshold}, {X: hi, Y: threshold}})
		if err != nil {
			return "", err
		}
		ln.Color, ln.Width, ln.Dashes = chart.Color(3), vg.Points(1.2), []vg.Length{vg.Points(5), vg.Points(3)}
		p.Add(ln)
		p.Legend.Add("SLO", ln)
	}
	p.Y.Min = 0
	svg, err := chart.SVG(p, 6*vg.Inch, 3.6*vg.Inch)
	return template.HTML(svg), err // drawn by gonum/plot from our numbers
}

// WriteHTML writes the plan as one self-contained HTML page: the answer,
// the two charts (inline SVG), the Pareto front and every candidate with
// what the search found of it.
func (pl *Plan) WriteHTML(w io.Writer) error {
	charts, err := pl.charts()
	if err != nil {
		return err
	}
	target := pl.Objective.TargetRate > 0
	type row struct {
		ID                                 int
		Name, Status, Reason               string
		Cost, Latency, Goodput, PerMillion string
		Front, Best                        bool
		// Outside is where its prediction leaves the twin's envelope.
		Outside []string
	}
	rowOf := func(c *Candidate) row {
		r := row{ID: c.ID, Name: c.Name, Status: string(c.Status), Reason: c.Reason, Cost: fmt.Sprintf("%.2f", c.USDPerHour),
			Latency: "", Goodput: "", PerMillion: usd(c.USDPer1MOut), Best: c == pl.Best, Outside: c.Outside}
		if l := c.Latency(target); l != Unbounded {
			r.Latency = fmtDur(l)
		}
		if g := c.GoodputRate(); g > 0 {
			r.Goodput = fmt.Sprintf("%.3g", g)
		}
		for _, f := range pl.Front {
			r.Front = r.Front || f == c
		}
		return r
	}
	data := struct {
		Title, Workload, Summary, Prices, LatencyName, Answer, Closest string
		Charts                                                         []figure
		Front, All                                                     []row
		PD                                                             *pdHTML
		// AnswerOutside are the answer's envelope flags (the unfitted
		// source's too); Interval its 80 % interval.
		AnswerOutside []string
		Interval      *engine.Interval
	}{Title: "tokentrace plan: " + pl.Title(), Workload: pl.Workload.Describe, Summary: pl.Summary(),
		Prices: "built-in table of " + pl.PricesDate, LatencyName: pl.latencyName(), Charts: charts, PD: pl.pdHTML()}
	if len(pl.PricesFiles) > 0 {
		data.Prices += fmt.Sprint(", with ", pl.PricesFiles)
	}
	if c := pl.Best; c != nil {
		data.Answer = fmt.Sprintf("#%d %s — %s", c.ID, c.Name, pl.figures(c))
		if q := pl.QualityNote(c); q != "" {
			data.Answer += " — " + q
		}
		data.AnswerOutside = slices.Clone(c.Outside)
		if c.Unfitted != "" {
			data.AnswerOutside = append(data.AnswerOutside, c.Unfitted)
		}
		if iv := c.Interval80; iv.TTFT > 0 {
			data.Interval = &iv
		}
	} else if c := pl.Closest; c != nil {
		data.Closest = fmt.Sprintf("no configuration meets the SLOs; closest: #%d %s — %s", c.ID, c.Name, pl.closestLine(c))
	}
	for _, c := range pl.Front {
		data.Front = append(data.Front, rowOf(c))
	}
	for _, c := range pl.Candidates {
		data.All = append(data.All, rowOf(c))
	}
	return planPage.Execute(w, data)
}

var planPage = chart.Page("plan", nil, `.answer { background:#fff; border:1px solid var(--line); border-left:5px solid var(--ok); border-radius:6px; padding:10px 14px; margin:14px 0; }
.answer.none { border-left-color:var(--crit); }
th:nth-child(2), td:nth-child(2), td.reason { text-align:left; }
td.reason { white-space:normal; color:var(--muted); min-width:240px; }
tr.best td { font-weight:700; }
.answer ul { margin:6px 0 0; padding-left:20px; } .outside { color:var(--warn); }
.mark { font-size:12px; text-transform:uppercase; letter-spacing:.04em; font-weight:600; border:1px solid var(--warn); border-radius:4px; padding:0 4px; }
.charts { display:grid; grid-template-columns:repeat(auto-fill,minmax(420px,1fr)); gap:14px; }
`, `<h1>{{.Title}}</h1>
<div class="muted">workload: {{.Workload}} · prices: {{.Prices}} · {{.Summary}}</div>
{{if .Answer}}<div class="answer" id="answer"><b>Answer</b>: {{.Answer}}
{{with .Interval}}<div class="interval{{if .Outside}} outside{{end}}">interval 80 %: {{.}}{{if .Outside}} <span class="mark">outside the twin's envelope</span>{{end}}</div>{{end}}
{{if .AnswerOutside}}<ul class="outside">{{range .AnswerOutside}}<li>outside the twin's envelope: {{.}}</li>{{end}}</ul>{{end}}</div>{{end}}
{{if .Closest}}<div class="answer none">{{.Closest}}</div>{{end}}
{{with .PD}}<h2>Aggregated or disaggregated</h2>
<div class="answer{{if .Close}} none{{end}}">{{.Verdict}}{{if .Close}} — close: the twin's stated error could reverse this; measure both (tokentrace verify){{end}}</div>
<div class="scroll"><table><tr><th>split</th><th>deployment</th><th>$/hour</th><th>{{$.LatencyName}} (interval)</th><th>goodput (req/s)</th><th>meets</th></tr>
{{range .Rows}}<tr><td>{{.Ratio}}</td><td>#{{.ID}} {{.Name}}</td><td>{{.Cost}}</td><td>{{.Latency}}</td><td>{{.Goodput}}</td><td>{{.Meets}}</td></tr>
{{end}}</table></div>{{end}}
{{if .Charts}}<h2>Cost, latency and goodput</h2>
<div class="charts">{{range .Charts}}<figure><div>{{.SVG}}</div><figcaption>{{.Caption}}</figcaption></figure>{{end}}</div>{{end}}
{{if .Front}}<h2>Pareto front</h2>
<div class="scroll"><table><tr><th>#</th><th>deployment</th><th>$/hour</th><th>{{.LatencyName}}</th><th>goodput (req/s)</th><th>$/1M output tokens</th></tr>
{{range .Front}}<tr{{if .Best}} class="best"{{end}}><td{{if .Outside}} class="outside" title="outside the twin's envelope"{{end}}>{{if .Outside}}!{{end}}{{.ID}}</td><td>{{.Name}}</td><td>{{.Cost}}</td><td>{{.Latency}}</td><td>{{.Goodput}}</td><td>{{.PerMillion}}</td></tr>
{{end}}</table></div>
{{range .Front}}{{$id := .ID}}{{range .Outside}}<div class="outside front-outside">! #{{$id}} outside the twin's envelope: {{.}}</div>
{{end}}{{end}}{{end}}
<h2>Every candidate</h2>
<div class="scroll"><table><tr><th>#</th><th>deployment</th><th>$/hour</th><th>status</th><th>{{.LatencyName}}</th><th>goodput (req/s)</th><th>$/1M out</th><th>why</th></tr>
{{range .All}}<tr{{if .Best}} class="best"{{end}}><td{{if .Outside}} class="outside" title="outside the twin's envelope: {{range $i, $f := .Outside}}{{if $i}}; {{end}}{{$f}}{{end}}"{{end}}>{{if .Outside}}!{{end}}{{.ID}}</td><td>{{.Name}}</td><td>{{.Cost}}</td><td>{{.Status}}{{if .Front}} · front{{end}}</td><td>{{.Latency}}</td><td>{{.Goodput}}</td><td>{{.PerMillion}}</td><td class="reason">{{.Reason}}</td></tr>
{{end}}</table></div>
<p class="muted">Made by tokentrace plan from simulations of the deployments (docs/plan.md). $/1M out: $/hour over the output tokens served at goodput (docs/metrics.md, "Cost"). ! a prediction outside the twin's envelope (docs/engines.md, "The envelope"): shown, and never the answer while a candidate inside meets the objective.</p>
`)
