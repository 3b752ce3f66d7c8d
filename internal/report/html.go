package report

import (
	"fmt"
	"html/template"
	"io"
	"slices"
	"strings"

	"github.com/tokentrace/tokentrace/internal/chart"
)

// WriteHTML writes the report as one self-contained HTML page: styles and
// charts (SVG from gonum.org/v1/plot) inline, no script, nothing fetched
// at view time; the diagnosis comes first. Charts are optional: those that
// cannot be drawn are a note on the page, never a lost report.
func (r *Report) WriteHTML(w io.Writer) error {
	charts, err := r.Charts()
	if err != nil {
		r = r.withNote("charts not drawn: " + err.Error())
	}
	whatIf, err := whatIfViews(r.WhatIf)
	if err != nil {
		r = r.withNote("what-if charts not drawn: " + err.Error())
	}
	data := struct {
		*Report
		Charts   []Chart
		Verdicts []Verdict
		Title    string
		Remedies []whatIfView
		Series   []Chart
	}{Report: r, Charts: charts, Title: r.Title(), Remedies: whatIf}
	if data.Series, err = r.SeriesCharts(); err != nil {
		data.Report = data.Report.withNote("time-series charts not drawn: " + err.Error())
	}
	if len(r.SLOs) > 0 {
		data.Verdicts = append(slices.Clone(r.SLOs), *r.AllSLOs)
	}
	return htmlPage.Execute(w, data)
}

var htmlPage = chart.Page("report", template.FuncMap{
	"ms":           fmtMS,
	"hopCell":      hopCell,
	"baselineLine": baselineLine,
	"num":          num,
	"pct":          func(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) },
	"svg":          func(s string) template.HTML { return template.HTML(s) }, // drawn by gonum/plot from our numbers
	"upper":        strings.ToUpper,
	"errs":         func(m map[string]int) string { return strings.TrimPrefix(errorList(m), " ") },
	"gt0":          func(v float64) bool { return v > 0 },
}, `.cards { display:grid; grid-template-columns:repeat(auto-fit,minmax(150px,1fr)); gap:10px; margin:14px 0; }
.card { background:#fff; border:1px solid var(--line); border-radius:8px; padding:10px 12px; }
.card b { display:block; font-size:20px; } .card span { color:var(--muted); font-size:13px; }
.finding { background:#fff; border:1px solid var(--line); border-left:5px solid var(--info); border-radius:6px; padding:10px 14px; margin:10px 0; }
.finding.critical { border-left-color:var(--crit); } .finding.warning { border-left-color:var(--warn); }
.finding h3 { margin:0 0 4px; font-size:16px; } .sev { font-size:12px; text-transform:uppercase; letter-spacing:.04em; font-weight:600; }
.critical .sev { color:var(--crit); } .warning .sev { color:var(--warn); } .info .sev { color:var(--info); }
.finding ul { margin:6px 0 0; padding-left:20px; }
.remedy.unranked { border-left-color:var(--muted); } .unranked .sev { color:var(--muted); }
.interval { font-size:13.5px; margin:6px 0 0; } .outside { color:var(--warn); }
.mark { font-size:12px; text-transform:uppercase; letter-spacing:.04em; font-weight:600; border:1px solid var(--warn); border-radius:4px; padding:0 4px; }
th:first-child, td:first-child { text-align:left; }
.pass { color:var(--ok); font-weight:600; } .fail { color:var(--crit); font-weight:600; } .largest { font-weight:700; }
.charts { display:grid; grid-template-columns:repeat(auto-fill,minmax(360px,1fr)); gap:14px; }
figure.wide { grid-column:1 / -1; }
table.errors td.msg { text-align:left; white-space:normal; word-break:break-word; }
.headline { background:#fff; border:1px solid var(--line); border-left:5px solid var(--info); border-radius:8px; padding:10px 14px; margin:12px 0; font-size:16px; }
.headline.failed { border-left-color:var(--crit); } .headline.passed { border-left-color:var(--ok); } .headline .verdict { font-weight:600; }
.remedy-chart { max-width:340px; margin:8px 0 0; } .extrapolates { color:var(--warn); }
`, `<h1>{{.Title}}</h1>
<div class="muted">{{with .Sources}}results {{range $i, $s := .}}{{if $i}}, {{end}}<code>{{$s}}</code>{{end}} · {{end}}report schema v{{.Schema}} · made by tokentrace from per-request records</div>
<div class="headline {{if .SLOsFailed}}failed{{else if .SLOs}}passed{{end}}" id="headline">
{{with .Tested}}<div><span class="muted">tested</span> {{.}}</div>{{end}}
<div class="verdict"><span class="muted">verdict</span> {{.Verdict}}</div>
</div>
{{with .Summary}}
<div class="cards">
  <div class="card"><b>{{.Requests}}</b><span>requests ({{.Succeeded}} ok, {{.Failed}} failed{{if .Errors}}: {{errs .Errors}}{{end}})</span></div>
  <div class="card"><b>{{printf "%.1f" .DurationS}} s</b><span>duration</span></div>
  <div class="card"><b>{{num .ThroughputRPS}} req/s</b><span>throughput (offered {{num .OfferedRPS}} req/s)</span></div>
  <div class="card"><b>{{num .OutputTPS}} tok/s</b><span>output tokens ({{num .TotalTPS}} tok/s total)</span></div>
</div>
{{if .TopErrors}}<div class="finding critical" id="top-errors"><span class="sev">why requests failed</span>
<table class="errors"><tr><th>requests</th><th>kind</th><th>message</th></tr>
{{range .TopErrors}}<tr><td>{{.Count}}</td><td><code>{{.Kind}}</code></td><td class="msg">{{.Message}}</td></tr>
{{end}}</table></div>{{end}}
{{end}}
{{range .HeadWarnings}}<div class="finding warning"><span class="sev">twin</span> {{.}}</div>{{end}}

{{if .Verdicts}}
<h2 id="slos">SLOs</h2>
<div class="scroll"><table>
<tr><th>SLO</th><th>value</th><th>95% CI</th><th>status</th><th>attainment</th><th>goodput</th></tr>
{{range .Verdicts}}<tr><td><code>{{.SLO}}</code></td>
<td>{{if and (ne .SLO "all") (ne .Status "no data")}}{{ms .ValueMS}}{{end}}</td>
<td>{{if and (ne .SLO "all") (ne .Status "no data")}}{{ms (index .CI 0)}} – {{ms (index .CI 1)}}{{end}}</td>
<td class="{{.Status}}">{{upper (print .Status)}}{{if .Uncertain}} (threshold inside CI){{end}}</td>
<td>{{pct .Attainment}}</td><td>{{num .GoodputRPS}} req/s</td></tr>
{{end}}</table></div>
{{end}}

<h2 id="diagnosis">Diagnosis</h2>
{{if not .Findings}}<p>No problem found by the rules.</p>{{end}}
{{range .Findings}}
<div class="finding {{.Severity}}">
  <span class="sev">{{.Severity}} · {{.Rule}}</span>
  <h3>{{.Title}}</h3>
  <div>{{.Evidence}}</div>
  {{if .Remedies}}<ul>{{range .Remedies}}<li>{{.}}</li>{{end}}</ul>{{end}}
</div>
{{end}}
{{with .Quieted}}<p class="quieted">Note: {{.Line}}.</p>{{end}}

{{with .WhatIf}}
<h2 id="what-if">What-if remedies</h2>
<p>The twin ({{.Basis}}) re-simulated this run's workload with its own configuration — {{.Deployment}} — then once per lever with that lever changed, the same seed. Baseline: {{baselineLine .}}.</p>
{{with .Interval80}}<p class="interval{{if .Outside}} outside{{end}}" id="what-if-interval">Baseline's interval 80 %: {{.}}{{if .Outside}} <span class="mark">outside the twin's envelope</span>{{end}}</p>{{end}}
{{with .Unreliable}}<p class="outside" id="what-if-unreliable"><b>Unreliable:</b> {{.}}</p>{{end}}
{{end}}
{{range $i, $r := .Remedies}}{{with $r}}
<div class="finding remedy{{if not .Rank}} unranked{{end}}" id="remedy-{{$i}}" data-lever="{{.Lever}}"{{if .Rank}} data-rank="{{.Rank}}"{{end}}>
  <span class="sev">what-if{{if .Rank}} #{{.Rank}}{{else}} · not ranked{{end}} · {{.Lever}}{{if .For}} · for {{range $i, $f := .For}}{{if $i}}, {{end}}{{$f}}{{end}}{{end}}</span>
  <h3>{{.Title}} <code>{{.Setting}}</code></h3>
  <div>{{.Line}}</div>
  {{if .Chart}}<figure class="remedy-chart">{{.Chart}}</figure>{{end}}
  {{if or .Assumes .Extrapolates}}<ul>{{range .Assumes}}<li>assumes: {{.}}</li>{{end}}{{range .Extrapolates}}<li class="extrapolates">extrapolates: {{.}}</li>{{end}}</ul>{{end}}
  {{with .Interval80}}<p class="interval{{if .Outside}} outside{{end}}">interval 80 %: {{.}}{{if .Outside}} <span class="mark">outside the twin's envelope</span>{{end}}</p>{{end}}
  {{if .Verify}}<p class="muted">verify once applied: <code>{{.Verify}}</code></p>{{end}}
  {{if .Gateway}}<p class="muted">or through the gateway: <code>{{.Gateway}}</code></p>{{end}}
</div>
{{end}}{{end}}
{{with .WhatIf}}{{with .NoGain}}<p class="muted" id="what-if-no-gain">{{.}}</p>{{end}}{{if .Assumptions}}<ul class="muted">{{range .Assumptions}}<li>{{.}}</li>{{end}}</ul>{{end}}
<p class="muted">{{.Simulations}} simulations in {{printf "%.1f" .ElapsedS}} s.</p>{{end}}


{{if .Charts}}
<h2 id="charts">Charts</h2>
<div class="charts">
{{range .Charts}}<figure id="fig-{{.ID}}" class="{{if .Wide}}wide{{end}}">{{svg .SVG}}<figcaption>{{.Caption}}</figcaption></figure>
{{end}}
</div>
{{end}}

{{template "series" .}}
{{if .Metrics}}
<h2 id="latency">Latency</h2>
<div class="scroll"><table>
<tr><th>metric</th><th>count</th><th>mean</th><th>p50</th><th>p90</th><th>p95</th><th>p99</th><th>p99.9</th><th>max</th><th>p95 95% CI</th><th>p99 95% CI</th></tr>
{{range .Metrics}}<tr><td>{{.Metric}}</td><td>{{.Count}}</td><td>{{ms .Mean}}</td><td>{{ms .P50}}</td><td>{{ms .P90}}</td><td>{{ms .P95}}</td><td>{{ms .P99}}</td><td>{{ms .P999}}</td><td>{{ms .Max}}</td>
<td>{{ms (index .P95CI 0)}} – {{ms (index .P95CI 1)}}</td><td>{{ms (index .P99CI 0)}} – {{ms (index .P99CI 1)}}{{if not .P99Trusted}} ⚠{{end}}</td></tr>
{{end}}</table></div>
<p class="muted">Nearest-rank percentiles; 95% bootstrap intervals. ⚠ fewer than 1,000 values: under 10 lie above the P99, too few to trust it.</p>
{{end}}

{{with .Decomposition}}{{template "decomp" .}}{{end}}
{{with .TTFTSplit}}{{template "decomp" .}}{{end}}

{{if .Phases}}
<h2 id="sweep">Sweep</h2>
<div class="scroll"><table>
<tr><th>point</th><th>offered</th><th>throughput</th><th>goodput</th><th>output tok/s</th><th>attainment</th><th>TTFT p50</th><th>TTFT p99</th><th>TPOT p99</th><th>E2E p99</th><th>SLOs</th></tr>
{{range .Phases}}<tr><td>{{.Name}}</td><td>{{num .OfferedRPS}}</td><td>{{num .ThroughputRPS}}</td><td>{{num .GoodputRPS}}</td><td>{{num .OutputTPS}}</td><td>{{pct .Attainment}}</td><td>{{ms .TTFTP50}}</td><td>{{ms .TTFTP99}}</td><td>{{ms .TPOTP99}}</td><td>{{ms .E2EP99}}</td><td class="{{if .SLOsMet}}pass">met{{else}}fail">fail{{end}}</td></tr>
{{end}}</table></div>
{{template "beforecells" .}}
{{with .Capacity}}<p>Capacity: <b>{{num .RPS}} req/s</b> ({{.Basis}}).</p>{{end}}
{{with .Pareto}}<ul>{{range .Lines}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{end}}

{{with .Sessions}}
<h2 id="sessions">Sessions</h2>
<p>{{.Headline}}.</p>
{{if .Failures}}<ul>{{range .Failures}}<li>session {{.Session}} failed at step {{.Step}}: <code>{{.ErrorKind}}</code>: {{.Error}}</li>{{end}}</ul>{{end}}
{{if .Sessions}}
<div class="scroll"><table>
<tr><th>part</th><th>mean</th><th>p50</th><th>p95</th><th>p99</th><th>share</th></tr>
{{with .Latency}}<tr><td><b>session</b></td><td>{{ms .Mean}}</td><td>{{ms .P50}}</td><td>{{ms .P95}}</td><td>{{ms .P99}}</td><td></td></tr>{{end}}
{{range .Components}}<tr><td>{{.Name}}</td><td>{{ms .Mean}}</td><td>{{ms .P50}}</td><td>{{ms .P95}}</td><td>{{ms .P99}}</td><td>{{pct .Share}}</td></tr>
{{end}}</table></div>
<ul>{{range .CriticalPaths}}<li>critical path, {{.Which}} session ({{.Session}}, {{ms .TotalMS}}): {{.Line}}</li>{{end}}
{{with .ParallelTools}}<li>{{.Line "parallel tool calls"}}</li>{{end}}
{{with .FasterModel}}<li>{{.Line "a faster model for the tool-calling steps"}}</li>{{end}}</ul>
{{end}}
{{end}}

{{if .Notes}}
<h2 id="notes">Notes</h2>
<ul>{{range .Notes}}<li>{{.}}</li>{{end}}</ul>
{{end}}
{{define "decomp"}}
<h2 id="{{.Of}}">{{if eq .Of "ttft_intended"}}TTFT split (from the intended send){{else}}Where the time goes (E2E from the intended send){{end}}</h2>
<div class="scroll"><table>
<tr><th>hop</th><th>stage</th>{{range .Groups}}<th>{{.Name}} (n={{.Requests}})</th>{{end}}</tr>
{{$groups := .Groups}}{{$stages := (index .Groups 0).Stages}}
{{range $i, $s := $stages}}<tr><td>{{hopCell $stages $i}}</td><td>{{$s.Stage}}</td>{{range $groups}}{{$st := index .Stages $i}}<td{{if and (eq $st.Stage .Largest) (eq $st.Hop .LargestHop)}} class="largest"{{end}}>{{ms $st.MeanMS}} ({{pct $st.Share}})</td>{{end}}</tr>
{{end}}<tr><td>total</td><td></td>{{range .Groups}}<td>{{ms .TotalMS}}</td>{{end}}</tr>
<tr><td>largest</td><td></td>{{range .Groups}}<td>{{.LargestHop}} {{.Largest}}</td>{{end}}</tr>
</table></div>
{{end}}
`+seriesSection+beforeCellsSection)

// withNote is a shallow copy of r with one more note, r unchanged.
func (r *Report) withNote(note string) *Report {
	c := *r
	c.Notes = append(slices.Clone(r.Notes), note)
	return &c
}
