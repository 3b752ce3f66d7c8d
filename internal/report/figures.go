package report

import (
	"math"
	"slices"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// Figures is the data the HTML report's charts are drawn from, sampled
// from the per-request numbers when the report is computed: its size is
// bounded whatever the length of the run. The charts of the decomposition,
// the sweep and the server's scraped samples read the Report's own fields.
type Figures struct {
	// CDFs are the empirical CDFs of TTFT, TPOT and E2E (those the run has).
	CDFs []CDF
	// Timeline cuts the run into equal time bins; nil when several inputs
	// are reported together (their clocks differ) or the run has no span.
	Timeline *Timeline
	// Scatters are TTFT against input tokens and E2E against output tokens.
	Scatters []Scatter
}

// XY is one point of a curve.
type XY struct{ X, Y float64 }

// CDF is one metric's empirical CDF at up to 400 points: X in
// milliseconds, Y the share of successful requests at or below it.
type CDF struct {
	Metric latency.Metric
	Points []XY
}

// Timeline is the run in equal time bins, X the bin's middle in seconds
// since the first intended send.
type Timeline struct {
	// StartNS is the instant time 0 stands for (the first intended send,
	// on the records' clock, which the server's samples share); EndS the
	// run's span in seconds. Every chart over time spans [0, EndS].
	StartNS int64
	EndS    float64
	BinS    float64 // bin width, seconds
	// TTFT and E2E percentiles (ms) of the requests sent in each bin; bins
	// without such requests are left out.
	TTFTP50, TTFTP99, E2EP50, E2EP99 []XY
	// OutputTPS is the output tokens per second of the requests that
	// completed in each bin.
	OutputTPS []XY
	// Waiting and Decoding are the client's view of requests in flight,
	// averaged over each bin: sent with no token yet, and between the
	// first token and the end.
	Waiting, Decoding []XY
}

// Scatter is a per-request scatter plot (at most about 3,000 points drawn)
// with the least-squares line fitted on every request.
type Scatter struct {
	ID, Title, XLabel, YLabel string
	Points                    []XY
	Fit                       *LineFit // nil when no line fits
}

// LineFit is a least-squares line y = Intercept + Slope·x over [X0, X1].
type LineFit struct {
	Intercept, Slope, R2 float64
	X0, X1               float64
}

// figures samples the charts' data from the rows.
func (a *analysis) figures() Figures {
	var f Figures
	if len(a.ok) == 0 {
		return f
	}
	for _, m := range []latency.Metric{latency.TTFT, latency.TPOT, latency.E2E} {
		if s := a.sample(m); len(s) > 0 {
			f.CDFs = append(f.CDFs, CDF{Metric: m, Points: cdfPoints(s, 400)})
		}
	}
	f.Timeline = a.timeline()
	f.Scatters = a.scatters()
	return f
}

// cdfPoints samples an ascending sample's empirical CDF at up to k points.
func cdfPoints(sorted []int64, k int) []XY {
	n := len(sorted)
	if n == 0 {
		return nil
	}
	step := max(1, n/k)
	var xys []XY
	for i := 0; i < n; i += step {
		xys = append(xys, XY{X: ms(sorted[i]), Y: float64(i+1) / float64(n)})
	}
	xys = append(xys, XY{X: ms(sorted[n-1]), Y: 1})
	return xys
}

// timeline bins the run: 30 to 120 bins, one per second in between.
func (a *analysis) timeline() *Timeline {
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
	waiting := make([]float64, nb)
	decoding := make([]float64, nb)
	for _, i := range a.ok {
		row := &a.rows[i]
		b := bin(row.sent)
		if row.firstTok > 0 {
			ttft[b] = append(ttft[b], row.firstTok-row.sent)
		}
		e2e[b] = append(e2e[b], row.end-row.sent)
		outTok[bin(row.end)] += float64(row.output)
		// Time-average over each bin of the requests in each state.
		first := row.firstOut()
		accum(waiting, row.sent, first, t0, width)
		accum(decoding, first, row.end, t0, width)
	}
	mid := func(b int) float64 { return (float64(b) + 0.5) * width / 1e9 }
	tl := &Timeline{StartNS: t0, EndS: float64(t1-t0) / 1e9, BinS: width / 1e9}
	for b := 0; b < nb; b++ {
		slices.Sort(ttft[b])
		slices.Sort(e2e[b])
		if len(ttft[b]) > 0 {
			tl.TTFTP50 = append(tl.TTFTP50, XY{mid(b), ms(stats.Percentile(ttft[b], 50))})
			tl.TTFTP99 = append(tl.TTFTP99, XY{mid(b), ms(stats.Percentile(ttft[b], 99))})
		}
		if len(e2e[b]) > 0 {
			tl.E2EP50 = append(tl.E2EP50, XY{mid(b), ms(stats.Percentile(e2e[b], 50))})
			tl.E2EP99 = append(tl.E2EP99, XY{mid(b), ms(stats.Percentile(e2e[b], 99))})
		}
		tl.OutputTPS = append(tl.OutputTPS, XY{mid(b), outTok[b] / (width / 1e9)})
		tl.Waiting = append(tl.Waiting, XY{mid(b), waiting[b]})
		tl.Decoding = append(tl.Decoding, XY{mid(b), decoding[b]})
	}
	return tl
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

// scatters: TTFT against input tokens and E2E against output tokens,
// each with its least-squares line.
func (a *analysis) scatters() []Scatter {
	specs := []struct {
		sc     Scatter
		xv     func(*row) float64
		metric latency.Metric // y: the request's value of this metric
	}{
		{Scatter{ID: "ttft-input", Title: "TTFT vs input tokens", XLabel: "input tokens", YLabel: "TTFT (ms)"},
			func(r *row) float64 { return float64(r.input) }, latency.TTFT},
		{Scatter{ID: "e2e-output", Title: "E2E vs output tokens", XLabel: "output tokens", YLabel: "E2E (ms)"},
			func(r *row) float64 { return float64(r.output) }, latency.E2E},
	}
	var out []Scatter
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
		sc := s.sc
		step := max(1, len(xs)/3000) // draw at most ~3,000 points; the fit uses all
		for i := 0; i < len(xs); i += step {
			sc.Points = append(sc.Points, XY{X: xs[i], Y: ys[i]})
		}
		if f, ok := linearFit(xs, ys); ok {
			sc.Fit = &LineFit{Intercept: f.Intercept, Slope: f.Slope, R2: f.R2, X0: slices.Min(xs), X1: slices.Max(xs)}
		}
		out = append(out, sc)
	}
	return out
}
