package report

import (
	"encoding/csv"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"

	"github.com/tokentrace/tokentrace/internal/chart"
)

// seriesHeader lists the time series' CSV columns (docs/report.md).
var seriesHeader = []string{"start_s", "end_s", "offered", "completed", "failed", "offered_rps", "achieved_rps", "in_flight",
	"ttft_count", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "tpot_count", "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms",
	"itl_count", "itl_p50_ms", "itl_p90_ms", "itl_p99_ms", "e2e_count", "e2e_p50_ms", "e2e_p90_ms", "e2e_p99_ms",
	"waiting", "running", "kv_cache_usage", "failures"}

// WriteSeriesCSV writes the time series, one line per window (the JSON
// form's time_series.windows); a value the window lacks is left empty,
// failures are "kind=n" joined by ";". Only the header when there is no
// series (several runs reported together).
func (r *Report) WriteSeriesCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(seriesHeader); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	opt := func(v *float64) string {
		if v == nil {
			return ""
		}
		return strconv.FormatFloat(*v, 'f', 3, 64)
	}
	var windows []SeriesPoint
	if r.TimeSeries != nil {
		windows = r.TimeSeries.Windows
	}
	for _, p := range windows {
		rec := []string{f(p.StartS), f(p.EndS), strconv.Itoa(p.Offered), strconv.Itoa(p.Completed), strconv.Itoa(p.Failed),
			f(p.OfferedRPS), f(p.AchievedRPS), f(p.InFlight)}
		for _, d := range []WindowDist{p.TTFT, p.TPOT, p.ITL, p.E2E} {
			if d.Count == 0 {
				rec = append(rec, "0", "", "", "")
				continue
			}
			rec = append(rec, strconv.FormatInt(d.Count, 10), f(d.P50), f(d.P90), f(d.P99))
		}
		var fails []string
		for _, k := range slices.Sorted(maps.Keys(p.Failures)) {
			fails = append(fails, fmt.Sprintf("%s=%d", k, p.Failures[k]))
		}
		rec = append(rec, opt(p.Waiting), opt(p.Running), opt(p.KVCacheUsage), strings.Join(fails, ";"))
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// SeriesCharts draws the time series: latency percentiles, load and the
// server's gauges per window, on one time axis. Nil without a series.
func (r *Report) SeriesCharts() ([]Chart, error) {
	ts := r.TimeSeries
	if ts == nil || len(ts.Windows) == 0 || r.Summary.Succeeded == 0 {
		return nil, nil
	}
	var out []Chart
	add := func(id, title, caption string, p *plot.Plot) error {
		p.X.Min, p.X.Max = 0, ts.Windows[len(ts.Windows)-1].EndS
		r.markTailPhase(p)
		svg, err := chart.SVG(p, wideW, wideH)
		if err != nil {
			return err
		}
		out = append(out, Chart{ID: id, Title: title, Caption: caption, SVG: svg, Wide: true})
		return nil
	}
	for _, draw := range []func(*TimeSeries, func(string, string, string, *plot.Plot) error) error{
		seriesLatency, seriesDecode, seriesLoad, seriesGauges} {
		if err := draw(ts, add); err != nil {
			return out, err
		}
	}
	return out, nil
}

// mid is a window's middle, in seconds since the start.
func (p *SeriesPoint) mid() float64 { return (p.StartS + p.EndS) / 2 }

// seriesLines draws one line per picked value over the windows that have it.
func seriesLines(p *plot.Plot, ts *TimeSeries, names []string, pick func(*SeriesPoint, int) (float64, bool), dashed func(int) bool) error {
	for i, name := range names {
		var pts plotter.XYs
		for k := range ts.Windows {
			if v, ok := pick(&ts.Windows[k], i); ok {
				pts = append(pts, plotter.XY{X: ts.Windows[k].mid(), Y: v})
			}
		}
		if err := chart.Line(p, name, pts, i, dashed(i)); err != nil {
			return err
		}
	}
	return nil
}

// distPick reads P50 (even i) or P99 (odd i) of the i/2-th of dists.
func distPick(dists func(*SeriesPoint) []WindowDist) func(*SeriesPoint, int) (float64, bool) {
	return func(w *SeriesPoint, i int) (float64, bool) {
		d := dists(w)[i/2]
		if d.Count == 0 {
			return 0, false
		}
		if i%2 == 0 {
			return max(d.P50, 0.001), true
		}
		return max(d.P99, 0.001), true
	}
}

// logY puts a chart's y axis on a log scale (its values are > 0).
func logY(p *plot.Plot) {
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = chart.LogTicks{}
}

// hasValues says whether some window has values of a metric.
func hasValues(ts *TimeSeries, d func(*SeriesPoint) WindowDist) bool {
	for k := range ts.Windows {
		if d(&ts.Windows[k]).Count > 0 {
			return true
		}
	}
	return false
}

func seriesLatency(ts *TimeSeries, add func(string, string, string, *plot.Plot) error) error {
	if !hasValues(ts, func(w *SeriesPoint) WindowDist { return w.TTFT }) && !hasValues(ts, func(w *SeriesPoint) WindowDist { return w.E2E }) {
		return nil
	}
	p := chart.New("TTFT and E2E per window", "time since start (s), by completion", "ms (log scale)")
	logY(p)
	pick := distPick(func(w *SeriesPoint) []WindowDist { return []WindowDist{w.TTFT, w.E2E} })
	if err := seriesLines(p, ts, []string{"TTFT p50", "TTFT p99", "E2E p50", "E2E p99"}, pick, func(i int) bool { return i%2 == 1 }); err != nil {
		return err
	}
	return add("series-latency", "TTFT and E2E per window",
		fmt.Sprintf("P50 and P99 of the requests completed in each %s window", fmtS(ts.WidthS)), p)
}

func seriesDecode(ts *TimeSeries, add func(string, string, string, *plot.Plot) error) error {
	if !hasValues(ts, func(w *SeriesPoint) WindowDist { return w.TPOT }) && !hasValues(ts, func(w *SeriesPoint) WindowDist { return w.ITL }) {
		return nil
	}
	p := chart.New("TPOT and ITL per window", "time since start (s), by completion", "ms (log scale)")
	logY(p)
	pick := distPick(func(w *SeriesPoint) []WindowDist { return []WindowDist{w.TPOT, w.ITL} })
	if err := seriesLines(p, ts, []string{"TPOT p50", "TPOT p99", "ITL p50", "ITL p99"}, pick, func(i int) bool { return i%2 == 1 }); err != nil {
		return err
	}
	return add("series-decode", "TPOT and ITL per window",
		fmt.Sprintf("P50 and P99 of the requests completed in each %s window (ITL: every gap of those requests)", fmtS(ts.WidthS)), p)
}

func seriesLoad(ts *TimeSeries, add func(string, string, string, *plot.Plot) error) error {
	p := chart.New("Load per window", "time since start (s)", "requests/s · requests")
	pick := func(w *SeriesPoint, i int) (float64, bool) {
		return [...]float64{w.OfferedRPS, w.AchievedRPS, w.InFlight, float64(w.Failed) / (w.EndS - w.StartS)}[i], true
	}
	if err := seriesLines(p, ts, []string{"offered req/s", "achieved req/s", "in flight", "failed req/s"}, pick, func(i int) bool { return i == 0 }); err != nil {
		return err
	}
	p.Y.Min = 0
	return add("series-load", "Load per window", "offered: intended sends in the window; achieved and failed: "+
		"completions in it; in flight: the time-average of requests between send and completion", p)
}

func seriesGauges(ts *TimeSeries, add func(string, string, string, *plot.Plot) error) error {
	if !slices.Contains(ts.Gauges, "waiting") && !slices.Contains(ts.Gauges, "running") {
		return seriesKV(ts, add)
	}
	p := chart.New("Server queue per window", "time since start (s)", "requests")
	pick := func(w *SeriesPoint, i int) (float64, bool) {
		if v := [...]*float64{w.Running, w.Waiting}[i]; v != nil {
			return *v, true
		}
		return 0, false
	}
	if err := seriesLines(p, ts, []string{"running (server)", "waiting (server)"}, pick, func(int) bool { return false }); err != nil {
		return err
	}
	p.Y.Min = 0
	if err := add("series-queue", "Server queue per window", "the means of the server's /metrics scrapes in each window", p); err != nil {
		return err
	}
	return seriesKV(ts, add)
}

func seriesKV(ts *TimeSeries, add func(string, string, string, *plot.Plot) error) error {
	if !slices.Contains(ts.Gauges, "kv_cache_usage") {
		return nil
	}
	p := chart.New("KV cache per window", "time since start (s)", "% of blocks in use")
	pick := func(w *SeriesPoint, _ int) (float64, bool) {
		if w.KVCacheUsage == nil {
			return 0, false
		}
		return 100 * *w.KVCacheUsage, true
	}
	if err := seriesLines(p, ts, []string{"KV-cache usage (server)"}, pick, func(int) bool { return false }); err != nil {
		return err
	}
	p.Y.Min, p.Y.Max = 0, 100
	return add("series-kv", "KV cache per window", "the mean of the server's KV-cache usage scrapes in each window", p)
}

// fmtS words a window width: "1 s", "0.5 s", "2 min".
func fmtS(s float64) string {
	if s >= 120 && s == float64(int(s)) && int(s)%60 == 0 {
		return fmt.Sprintf("%d min", int(s)/60)
	}
	return strconv.FormatFloat(s, 'g', 4, 64) + " s"
}

// seriesSection is the HTML report's time-series section (its own, after
// the charts): the run per window, and where its CSV and JSON are.
const seriesSection = `{{define "series"}}{{if .Series}}{{with .TimeSeries}}
<h2 id="time-series">Over the run, per window</h2>
<p class="muted">{{len .Windows}} windows of {{printf "%g" .WidthS}} s from the run's start; each request counts in the window of its completion (docs/metrics.md, "Windows"). Every window's figures: <code>report --format series-csv</code>, or <code>time_series</code> in <code>--format json</code>.</p>
{{end}}<div class="charts">
{{range .Series}}<figure id="fig-{{.ID}}" class="{{if .Wide}}wide{{end}}">{{svg .SVG}}<figcaption>{{.Caption}}</figcaption></figure>
{{end}}</div>
{{end}}{{end}}
`
