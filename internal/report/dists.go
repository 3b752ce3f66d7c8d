package report

import (
	"slices"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// metricValue is one successful request's value of a metric; ok false when
// it has none. The per-request formulas are latency.Record's; ITL and ICL
// are the request's largest gaps, kept on the row.
func metricValue(r *row, m latency.Metric) (int64, bool) {
	switch m {
	case latency.ITL:
		return r.itlMax, r.output >= 2 && r.nchunks > 0
	case latency.ICL:
		return r.stall, r.nchunks >= 2
	}
	rec := latency.Record{IntendedNS: r.intended, SentNS: r.sent, FirstTokenNS: r.firstTok, EndNS: r.end,
		OutputTokens: int(r.output), FirstReasonNS: r.firstReason}
	d, ok := rec.Value(m)
	return int64(d), ok
}

// headMetrics are the metrics a report leads with; ttft_answer only when
// some answer had reasoning before it (else it is ttft).
var headMetrics = []latency.Metric{latency.TTFT, latency.TTFTAnswer, latency.TPOT, latency.ITL, latency.E2E,
	latency.TTFTIntended, latency.E2EIntended, latency.ClientQueue}

// reasons reports whether some successful request reasoned before its
// answer.
func (a *analysis) reasons() bool {
	for _, i := range a.ok {
		if a.rows[i].firstReason != 0 {
			return true
		}
	}
	return false
}

// sample returns the sorted sample of a per-request metric over
// successful requests, cached.
func (a *analysis) sample(m latency.Metric) []int64 {
	if s, ok := a.sorted[string(m)]; ok {
		return s
	}
	var out []int64
	for _, i := range a.ok {
		if v, ok := metricValue(&a.rows[i], m); ok {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	a.sorted[string(m)] = out
	return out
}

// stageSample returns the sorted sample of a stage over successful
// requests, cached (every stage's is filled in one pass).
func (a *analysis) stageSample(name string) []int64 {
	if s, ok := a.sorted[name]; ok {
		return s
	}
	a.stageSamples()
	return a.sorted[name]
}

// sampleFor is the sorted sample behind a metric (ITL only when kept
// exactly).
func (a *analysis) sampleFor(m latency.Metric) []int64 {
	if m == latency.ITL {
		if a.itl.Hist() != nil {
			return nil
		}
		a.gapDist(latency.ITL, &a.itl)
		return a.sorted[string(latency.ITL)]
	}
	return a.sample(m)
}

// stageSamples fills the sorted samples of every stage in one pass.
func (a *analysis) stageSamples() {
	out := a.collectStages()
	for st := stConnect; st < nStages; st++ {
		slices.Sort(out[st])
		a.sorted[string(stageOrder[st])] = out[st]
	}
}

func (a *analysis) collectStages() [nStages][]int64 {
	var n [nStages]int
	for _, i := range a.ok {
		for st := stConnect; st < nStages; st++ {
			if stageApplies(&a.rows[i], st) {
				n[st]++
			}
		}
	}
	var out [nStages][]int64
	for st := range out {
		if n[st] > 0 {
			out[st] = make([]int64, 0, n[st]) // sized once: a million requests' samples are not copied as they grow
		}
	}
	for _, i := range a.ok {
		r := &a.rows[i]
		s := r.stages()
		for st := stConnect; st < nStages; st++ {
			if stageApplies(r, st) {
				out[st] = append(out[st], s[st])
			}
		}
	}
	return out
}

func (a *analysis) distOf(name string, sorted []int64) Dist {
	d := Dist{Metric: name, Count: int64(len(sorted))}
	if len(sorted) == 0 {
		return d
	}
	d.Mean = msf(stats.Mean(sorted))
	d.P50, d.P90 = ms(stats.Percentile(sorted, 50)), ms(stats.Percentile(sorted, 90))
	d.P95, d.P99 = ms(stats.Percentile(sorted, 95)), ms(stats.Percentile(sorted, 99))
	d.P999, d.Max = ms(stats.Percentile(sorted, 99.9)), ms(sorted[len(sorted)-1])
	lo, hi := stats.BootstrapCI(sorted, 95, a.opts.resamples(), a.rng)
	d.P95CI = [2]float64{ms(lo), ms(hi)}
	lo, hi = stats.BootstrapCI(sorted, 99, a.opts.resamples(), a.rng)
	d.P99CI = [2]float64{ms(lo), ms(hi)}
	d.P99Trusted = len(sorted) >= 1000
	return d
}

func (a *analysis) gapDist(m latency.Metric, g *stats.Sample) Dist {
	h := g.Hist()
	name := string(m)
	if h == nil {
		if _, ok := a.sorted[name]; !ok {
			s := slices.Clone(g.Values())
			slices.Sort(s)
			a.sorted[name] = s
		}
		return a.distOf(name, a.sorted[name])
	}
	d := Dist{Metric: name, Count: h.Count(), Approx: true, P99Trusted: h.Count() >= 1000}
	d.Mean = msf(h.Mean())
	d.P50, d.P90, d.P95 = ms(h.Percentile(50)), ms(h.Percentile(90)), ms(h.Percentile(95))
	d.P99, d.P999, d.Max = ms(h.Percentile(99)), ms(h.Percentile(99.9)), ms(h.Max())
	// With millions of gaps the bootstrap interval is narrower than the
	// histogram's resolution; report the resolution instead.
	d.P95CI = [2]float64{d.P95 * (1 - stats.RelativeError), d.P95 * (1 + stats.RelativeError)}
	d.P99CI = [2]float64{d.P99 * (1 - stats.RelativeError), d.P99 * (1 + stats.RelativeError)}
	return d
}

func (a *analysis) dists(rep *Report) {
	if len(a.ok) == 0 {
		rep.Metrics = []Dist{}
		return
	}
	reasons := a.reasons()
	for _, m := range headMetrics {
		if m == latency.TTFTAnswer && !reasons {
			continue
		}
		if m == latency.ITL {
			if a.itl.Count() > 0 {
				rep.Metrics = append(rep.Metrics, a.gapDist(latency.ITL, &a.itl))
			}
			continue
		}
		s := a.sample(m)
		if len(s) > 0 {
			rep.Metrics = append(rep.Metrics, a.distOf(string(m), s))
		}
	}
	for st := stConnect; st < nStages; st++ {
		name := string(stageOrder[st])
		s := a.stageSample(name)
		if len(s) == 0 || (s[0] == 0 && s[len(s)-1] == 0 && st != stDecode) {
			continue // never happened in this run (e.g. no new connections)
		}
		rep.Metrics = append(rep.Metrics, a.distOf(name, s))
	}
}
