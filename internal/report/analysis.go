package report

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// analysis keeps the per-request numbers behind a Report for the charts,
// the CSV, the diagnosis and comparisons.
type analysis struct {
	opts     Options
	rows     []row
	ok       []int32 // indices of successful rows, in input order
	errKinds []string
	phases   []string
	sources  []string
	runs     []RunInfo
	itl, icl stats.Sample

	// Sorted samples over successful requests, nanoseconds.
	sorted   map[string][]int64
	duration int64 // ns, Σ over sources of the span
	// timeOrder is a.ok sorted by send instant, built on first use.
	timeOrder []int32
	rng       *rand.Rand
}

// Report analyses what was added so far. It can be called more than once.
func (c *Collector) Report() *Report {
	a := &analysis{
		opts: c.opts, rows: c.rows, errKinds: c.errKinds, phases: c.phases,
		sources: c.sources, runs: c.runs, itl: c.itl.Snapshot(), icl: c.icl.Snapshot(),
		sorted: map[string][]int64{}, rng: newRand(c.opts.seed()),
	}
	rep := &Report{Schema: Schema, Sources: nonEmpty(c.sources), Runs: c.runs, a: a}
	rep.Notes = append(rep.Notes, c.notes...)
	for i := range a.rows {
		if a.rows[i].ok() {
			a.ok = append(a.ok, int32(i))
		}
	}
	a.summary(rep, c.warmup)
	if len(a.rows) == 0 {
		rep.Notes = append(rep.Notes, "no measured requests: nothing to report")
		rep.Findings = []Finding{}
		return rep
	}
	if len(a.ok) == 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf(
			"no successful requests (%d failed): no latency percentiles, decomposition or throughput; every SLO fails",
			len(a.rows)))
	}
	a.precompute()
	a.dists(rep)
	if len(a.ok) > 0 {
		rep.Decomposition = a.decompose("e2e_intended", func(r *row) int64 { return r.end - r.intended }, allStages())
		rep.TTFTSplit = a.decompose("ttft_intended", func(r *row) int64 { return r.firstOut() - r.intended }, ttftStages)
	}
	a.verdicts(rep)
	a.phaseSummaries(rep)
	rep.Findings = diagnose(a, rep)
	if rep.Findings == nil {
		rep.Findings = []Finding{}
	}
	return rep
}

func nonEmpty(ss []string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	if out == nil {
		out = []string{}
	}
	return out
}

func allStages() []int {
	s := make([]int, nStages)
	for i := range s {
		s[i] = i
	}
	return s
}

// span returns, per group key, the first intended send and the last end
// (or last send for requests that never ended).
func span(rows []row, key func(*row) int) map[int][2]int64 {
	m := map[int][2]int64{}
	for i := range rows {
		r := &rows[i]
		last := max(r.end, r.firstTok, r.sent)
		k := key(r)
		s, ok := m[k]
		if !ok {
			s = [2]int64{r.intended, last}
		}
		s[0] = min(s[0], r.intended)
		s[1] = max(s[1], last)
		m[k] = s
	}
	return m
}

func (a *analysis) summary(rep *Report, warmup int) {
	s := &rep.Summary
	s.Requests = len(a.rows)
	s.Succeeded = len(a.ok)
	s.Failed = s.Requests - s.Succeeded
	s.Warmup = warmup
	for i := range a.rows {
		r := &a.rows[i]
		if !r.ok() {
			if s.Errors == nil {
				s.Errors = map[string]int{}
			}
			s.Errors[a.errKinds[r.errKind]]++
			continue
		}
		s.InputTokens += int64(r.input)
		s.OutputTokens += int64(r.output)
		if r.hasServer() {
			s.ServerSplit++
		}
		if r.flags&flagTruncated != 0 {
			s.Truncated++
		}
	}
	for _, sp := range span(a.rows, func(r *row) int { return int(r.src) }) {
		a.duration += sp[1] - sp[0]
	}
	s.DurationS = float64(a.duration) / 1e9
	if a.duration > 0 {
		s.ThroughputRPS = float64(s.Succeeded) / s.DurationS
		s.OutputTPS = float64(s.OutputTokens) / s.DurationS
		s.TotalTPS = float64(s.InputTokens+s.OutputTokens) / s.DurationS
	}
	s.OfferedRPS = offeredRate(a.rows, nil)
	s.CompletionRPS = completionRate(a.rows, nil)
}

// completionRate is (n − 1) / (last end − first end) over the successful
// rows that keep returns true for, per source, summed.
func completionRate(rows []row, keep func(*row) bool) float64 {
	return eventRate(rows, func(r *row) bool { return r.ok() && (keep == nil || keep(r)) },
		func(r *row) int64 { return r.end })
}

// offeredRate is (n − 1) / (last − first intended send) over the rows that
// keep returns true for (all when keep is nil), per source, summed.
func offeredRate(rows []row, keep func(*row) bool) float64 {
	return eventRate(rows, keep, func(r *row) int64 { return r.intended })
}

// eventRate is (n − 1) / (last − first instant at(r)) over the rows that
// keep returns true for (all when keep is nil), per source, summed.
func eventRate(rows []row, keep func(*row) bool, at func(*row) int64) float64 {
	type acc struct {
		n      int
		lo, hi int64
	}
	bySrc := map[uint16]*acc{}
	for i := range rows {
		r := &rows[i]
		if keep != nil && !keep(r) {
			continue
		}
		t := at(r)
		x := bySrc[r.src]
		if x == nil {
			x = &acc{lo: t, hi: t}
			bySrc[r.src] = x
		}
		x.n++
		x.lo, x.hi = min(x.lo, t), max(x.hi, t)
	}
	var rate float64
	for _, x := range bySrc {
		if x.n > 1 && x.hi > x.lo {
			rate += float64(x.n-1) / (float64(x.hi-x.lo) / 1e9)
		}
	}
	return rate
}

// metricValue is one successful request's value of a metric; ok false when
// it has none. The per-request formulas are latency.Record's; ITL and ICL
// are the request's largest gaps, kept on the row.
func metricValue(r *row, m string) (int64, bool) {
	switch m {
	case "itl":
		return r.itlMax, r.output >= 2 && r.nchunks > 0
	case "icl":
		return r.stall, r.nchunks >= 2
	}
	rec := latency.Record{IntendedNS: r.intended, SentNS: r.sent, FirstTokenNS: r.firstTok, EndNS: r.end,
		OutputTokens: int(r.output)}
	d, ok := rec.Value(latency.Metric(m))
	return int64(d), ok
}

var headMetrics = []string{"ttft", "tpot", "itl", "e2e", "ttft_intended", "e2e_intended", "client_queue"}

// sample returns the sorted sample of a per-request metric or stage over
// successful requests, cached.
func (a *analysis) sample(name string) []int64 {
	if s, ok := a.sorted[name]; ok {
		return s
	}
	if st := stageIndex(name); st >= 0 {
		a.stageSamples()
		return a.sorted[name]
	}
	var out []int64
	for _, i := range a.ok {
		if v, ok := metricValue(&a.rows[i], name); ok {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	a.sorted[name] = out
	return out
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
	var out [nStages][]int64
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

// precompute builds and sorts the samples every report needs, one sort per
// CPU at a time: with a million requests the sorts are most of the work.
func (a *analysis) precompute() {
	if len(a.ok) == 0 {
		return
	}
	names := []string{"ttft", "tpot", "e2e", "ttft_intended", "e2e_intended", "client_queue"}
	samples := make([][]int64, len(names))
	for i, m := range names {
		for _, j := range a.ok {
			if v, ok := metricValue(&a.rows[j], m); ok {
				samples[i] = append(samples[i], v)
			}
		}
	}
	st := a.collectStages()
	for k := stConnect; k < nStages; k++ {
		names = append(names, string(stageOrder[k]))
		samples = append(samples, st[k])
	}
	for _, g := range []struct {
		name string
		gaps *stats.Sample
	}{{"itl", &a.itl}, {"icl", &a.icl}} {
		if g.gaps.Hist() == nil {
			names = append(names, g.name)
			samples = append(samples, slices.Clone(g.gaps.Values()))
		}
	}
	sem := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	var wg sync.WaitGroup
	for i := range samples {
		wg.Go(func() {
			sem <- struct{}{}
			slices.Sort(samples[i])
			<-sem
		})
	}
	wg.Wait()
	for i, name := range names {
		a.sorted[name] = samples[i]
	}
}

func stageIndex(name string) int {
	for i, s := range stageOrder {
		if string(s) == name && s != latency.StageClientQueue {
			return i
		}
	}
	return -1
}

// stageApplies says whether a stage is measured for a request: the server's
// stages (and network, stream tail) need its split; unattributed needs its absence.
func stageApplies(r *row, st int) bool {
	switch st {
	case stSQ, stPrefill, stNetwork, stTail:
		return r.hasServer()
	case stUnattr:
		return !r.hasServer()
	case stGateway:
		return r.gateway > 0
	}
	return true
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

func (a *analysis) gapDist(name string, g *stats.Sample) Dist {
	h := g.Hist()
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
	for _, m := range headMetrics {
		if m == "itl" {
			if a.itl.Count() > 0 {
				rep.Metrics = append(rep.Metrics, a.gapDist("itl", &a.itl))
			}
			continue
		}
		s := a.sample(m)
		if len(s) > 0 {
			rep.Metrics = append(rep.Metrics, a.distOf(m, s))
		}
	}
	for st := stConnect; st < nStages; st++ {
		name := string(stageOrder[st])
		s := a.sample(name)
		if len(s) == 0 || (s[0] == 0 && s[len(s)-1] == 0 && st != stDecode) {
			continue // never happened in this run (e.g. no new connections)
		}
		rep.Metrics = append(rep.Metrics, a.distOf(name, s))
	}
}

// decompose groups successful requests by the value of total (ranked) and
// averages the given stages over each group.
func (a *analysis) decompose(of string, total func(*row) int64, stages []int) *Decomposition {
	n := len(a.ok)
	type pair struct {
		v int64
		i int32
	}
	ps := make([]pair, n)
	for k, i := range a.ok {
		ps[k] = pair{total(&a.rows[i]), i}
	}
	slices.SortFunc(ps, func(x, y pair) int {
		if c := cmpInt64(x.v, y.v); c != 0 {
			return c
		}
		return int(x.i - y.i)
	})

	d := &Decomposition{Of: of}
	rank := func(p float64) int { return int(stats.Rank(p, int64(n))) }
	lo, hi := rank(40)-1, rank(60)
	groups := []struct {
		name   string
		lo, hi int
	}{
		{"median", lo, max(hi, lo+1)},
		{"p95+", min(rank(95), n-1), n},
		{"p99+", min(rank(99), n-1), n},
	}
	for _, g := range groups {
		var sum [nStages]float64
		var tot float64
		for _, p := range ps[g.lo:g.hi] {
			s := a.rows[p.i].stages()
			for _, st := range stages {
				sum[st] += float64(s[st])
			}
			tot += float64(p.v)
		}
		cnt := float64(g.hi - g.lo)
		sg := StageGroup{Name: g.name, Requests: g.hi - g.lo, TotalMS: msf(tot / cnt)}
		best, bestV := "", math.Inf(-1)
		for _, st := range stages {
			m := sum[st] / cnt
			if !stageSeen(a, st) {
				continue
			}
			share := 0.0
			if tot != 0 {
				share = sum[st] / tot
			}
			sg.Stages = append(sg.Stages, StageShare{Stage: string(stageOrder[st]), MeanMS: msf(m), Share: share})
			if m > bestV {
				best, bestV = string(stageOrder[st]), m
			}
		}
		sg.Largest = best
		d.Groups = append(d.Groups, sg)
	}
	return d
}

// stageSeen says whether any successful request has the stage.
func stageSeen(a *analysis, st int) bool {
	switch st {
	case stCQ, stConnect, stSend, stDecode:
		return true
	}
	for _, i := range a.ok {
		if r := &a.rows[i]; stageApplies(r, st) {
			return true
		}
	}
	return false
}

func cmpInt64(x, y int64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// meets reports whether a request succeeded and met one SLO.
func meets(r *row, s latency.SLO) bool {
	if !r.ok() {
		return false
	}
	v, ok := metricValue(r, string(s.Metric))
	return !ok || s.Met(time.Duration(v))
}

func (a *analysis) verdicts(rep *Report) {
	slos := a.opts.SLOs
	if len(slos) == 0 {
		return
	}
	n := len(a.rows)
	durS := float64(a.duration) / 1e9
	fill := func(v *Verdict, meeting int) {
		v.Meeting = meeting
		if n > 0 {
			v.Attainment = float64(meeting) / float64(n)
		}
		if durS > 0 {
			v.GoodputRPS = float64(meeting) / durS
		}
	}
	allOK := true
	for _, s := range slos {
		v := Verdict{SLO: s.String(), Metric: string(s.Metric), Percentile: s.Percentile, ThresholdMS: ms(int64(s.Max))}
		meeting := 0
		for i := range a.rows {
			if meets(&a.rows[i], s) {
				meeting++
			}
		}
		fill(&v, meeting)
		var sample []int64
		var hist *stats.Histogram
		switch s.Metric {
		case latency.ITL:
			a.gapDist("itl", &a.itl)
			sample, hist = a.sorted["itl"], a.itl.Hist()
		case latency.ICL:
			a.gapDist("icl", &a.icl)
			sample, hist = a.sorted["icl"], a.icl.Hist()
		default:
			sample = a.sample(string(s.Metric))
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
			v.Status = "no data"
			allOK = false
		case v.ValueMS <= v.ThresholdMS:
			v.Status = "pass"
		default:
			v.Status = "fail"
			allOK = false
		}
		v.Uncertain = v.Status != "no data" && v.CI[0] <= v.ThresholdMS && v.ThresholdMS < v.CI[1]
		rep.SLOs = append(rep.SLOs, v)
	}
	all := Verdict{SLO: "all", Status: "pass"}
	if !allOK {
		all.Status = "fail"
	}
	meeting := 0
	for i := range a.rows {
		if meetsAll(&a.rows[i], slos) {
			meeting++
		}
	}
	fill(&all, meeting)
	rep.AllSLOs = &all
}

func meetsAll(r *row, slos []latency.SLO) bool {
	for _, s := range slos {
		if !meets(r, s) {
			return false
		}
	}
	return r.ok()
}

// phaseSummaries fills rep.Phases when the records carry more than one
// phase (a sweep), and rep.Capacity.
func (a *analysis) phaseSummaries(rep *Report) {
	used := map[uint16]bool{}
	for i := range a.rows {
		used[a.rows[i].phase] = true
	}
	if len(used) < 2 {
		return
	}
	points := map[string]SweepPoint{}
	for _, run := range a.runs {
		for _, p := range run.Points {
			points[p.Phase] = p
		}
	}
	spans := span(a.rows, func(r *row) int { return int(r.phase)<<16 | int(r.src) })
	for _, p := range slices.Sorted(maps.Keys(used)) {
		name := a.phases[p]
		if name == "" {
			name = "(none)"
		}
		ph := Phase{Name: name}
		var ttft, tpot, e2e []int64
		meeting := 0
		for i := range a.rows {
			r := &a.rows[i]
			if r.phase != p {
				continue
			}
			ph.Requests++
			if meetsAll(r, a.opts.SLOs) {
				meeting++
			}
			if !r.ok() {
				continue
			}
			ph.Succeeded++
			if v, ok := metricValue(r, "ttft"); ok {
				ttft = append(ttft, v)
			}
			if v, ok := metricValue(r, "tpot"); ok {
				tpot = append(tpot, v)
			}
			if v, ok := metricValue(r, "e2e"); ok {
				e2e = append(e2e, v)
			}
		}
		var d int64
		for k, sp := range spans {
			if uint16(k>>16) == p {
				d += sp[1] - sp[0]
			}
		}
		ph.DurationS = float64(d) / 1e9
		ph.OfferedRPS = offeredRate(a.rows, func(r *row) bool { return r.phase == p })
		ph.CompletionRPS = completionRate(a.rows, func(r *row) bool { return r.phase == p })
		if pt, ok := points[a.phases[p]]; ok {
			if pt.OfferedRate > 0 {
				ph.OfferedRPS = pt.OfferedRate
			}
			ph.Concurrency = pt.Concurrency
		}
		if ph.DurationS > 0 {
			ph.ThroughputRPS = float64(ph.Succeeded) / ph.DurationS
			ph.GoodputRPS = float64(meeting) / ph.DurationS
		}
		if ph.Requests > 0 {
			ph.Attainment = float64(meeting) / float64(ph.Requests)
		}
		for _, s := range [][]int64{ttft, tpot, e2e} {
			slices.Sort(s)
		}
		ph.TTFTP50, ph.TTFTP99 = ms(stats.Percentile(ttft, 50)), ms(stats.Percentile(ttft, 99))
		ph.TPOTP50, ph.TPOTP99 = ms(stats.Percentile(tpot, 50)), ms(stats.Percentile(tpot, 99))
		ph.E2EP50, ph.E2EP99 = ms(stats.Percentile(e2e, 50)), ms(stats.Percentile(e2e, 99))
		ph.SLOsMet = ph.Succeeded > 0 && phaseMeets(a.opts.SLOs, ttft, tpot, e2e)
		rep.Phases = append(rep.Phases, ph)
	}
	slices.SortStableFunc(rep.Phases, func(x, y Phase) int {
		if x.OfferedRPS != y.OfferedRPS {
			if x.OfferedRPS < y.OfferedRPS {
				return -1
			}
			return 1
		}
		return x.Concurrency - y.Concurrency
	})
	// Capacity: the highest offered rate whose SLOs hold and whose
	// completion rate keeps up (≥ 95 % of offered); without SLOs, the last
	// that keeps up.
	for _, ph := range rep.Phases {
		keeps := ph.OfferedRPS > 0 && ph.CompletionRPS >= 0.95*ph.OfferedRPS
		if keeps && (len(a.opts.SLOs) == 0 || ph.SLOsMet) {
			basis := "highest offered rate whose completion rate kept up (≥95% of offered)"
			if len(a.opts.SLOs) > 0 {
				basis = "highest offered rate meeting every SLO with completion rate ≥95% of offered"
			}
			rep.Capacity = &Capacity{RPS: ph.OfferedRPS, Phase: ph.Name, Basis: basis}
		}
	}
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

// fmtMS formats milliseconds compactly: 0.42ms, 12.3ms, 1.52s.
func fmtMS(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.Abs(v) >= 10000:
		return fmt.Sprintf("%.1fs", v/1000)
	case math.Abs(v) >= 1000:
		return fmt.Sprintf("%.2fs", v/1000)
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0fms", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1fms", v)
	default:
		return fmt.Sprintf("%.2fms", v)
	}
}
