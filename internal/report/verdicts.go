package report

import (
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// meets reports whether a request succeeded and met one SLO.
func meets(r *row, s latency.SLO) bool {
	if !r.ok() {
		return false
	}
	v, ok := metricValue(r, s.Metric)
	return !ok || s.Met(time.Duration(v))
}

func meetsAll(r *row, slos []latency.SLO) bool {
	for _, s := range slos {
		if !meets(r, s) {
			return false
		}
	}
	return r.ok()
}

// verdicts judges every SLO on the run, and all of them together.
func (a *analysis) verdicts(rep *Report) {
	slos := a.opts.SLOs
	if len(slos) == 0 {
		return
	}
	allOK := true
	for _, s := range slos {
		v := a.verdict(s)
		allOK = allOK && v.Status == StatusPass
		rep.SLOs = append(rep.SLOs, v)
	}
	all := Verdict{SLO: "all", Status: StatusPass}
	if !allOK {
		all.Status = StatusFail
	}
	meeting := 0
	for i := range a.rows {
		if meetsAll(&a.rows[i], slos) {
			meeting++
		}
	}
	a.attain(&all, meeting)
	rep.AllSLOs = &all
}

// attain fills a verdict's requests meeting it, attainment and goodput.
func (a *analysis) attain(v *Verdict, meeting int) {
	v.Meeting = meeting
	if n := len(a.rows); n > 0 {
		v.Attainment = float64(meeting) / float64(n)
	}
	if durS := float64(a.duration) / 1e9; durS > 0 {
		v.GoodputRPS = float64(meeting) / durS
	}
}

// verdict judges one SLO: the run's percentile with its interval (the
// histogram's reading for gaps past the exact cap), pass or fail.
func (a *analysis) verdict(s latency.SLO) Verdict {
	v := Verdict{SLO: s.String(), Metric: s.Metric, Percentile: s.Percentile, ThresholdMS: ms(int64(s.Max))}
	meeting := 0
	for i := range a.rows {
		if meets(&a.rows[i], s) {
			meeting++
		}
	}
	a.attain(&v, meeting)
	var sample []int64
	var hist *stats.Histogram
	switch s.Metric {
	case latency.ITL:
		a.gapDist(latency.ITL, &a.itl)
		sample, hist = a.sorted[string(latency.ITL)], a.itl.Hist()
	case latency.ICL:
		a.gapDist(latency.ICL, &a.icl)
		sample, hist = a.sorted[string(latency.ICL)], a.icl.Hist()
	default:
		sample = a.sample(s.Metric)
	}
	switch {
	case hist != nil:
		v.ValueMS = ms(hist.Percentile(s.Percentile))
		v.CI = [2]float64{v.ValueMS, v.ValueMS}
	case len(sample) > 0:
		v.ValueMS = ms(stats.Percentile(sample, s.Percentile))
		lo, hi := stats.BootstrapCI(sample, s.Percentile, a.opts.resamples(), a.rng)
		v.CI = [2]float64{ms(lo), ms(hi)}
	}
	switch {
	case len(sample) == 0 && hist == nil:
		v.Status = StatusNoData
	case v.ValueMS <= v.ThresholdMS:
		v.Status = StatusPass
	default:
		v.Status = StatusFail
	}
	v.Uncertain = v.Status != StatusNoData && v.CI[0] <= v.ThresholdMS && v.ThresholdMS < v.CI[1]
	return v
}

// phaseMeets judges the SLOs on TTFT, TPOT and E2E over one phase.
func phaseMeets(slos []latency.SLO, ttft, tpot, e2e []int64) bool {
	for _, s := range slos {
		var x []int64
		switch s.Metric {
		case latency.TTFT:
			x = ttft
		case latency.TPOT:
			x = tpot
		case latency.E2E:
			x = e2e
		default:
			continue
		}
		if len(x) == 0 || stats.Percentile(x, s.Percentile) > int64(s.Max) {
			return false
		}
	}
	return true
}
