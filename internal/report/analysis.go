package report

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// analysis holds the per-request numbers of a collector while a Report is
// computed from them: the rows, their sorted samples, and what the
// diagnosis reads. The Report it produces holds none of it.
type analysis struct {
	opts     Options
	rows     []row
	steps    []stepRow
	ok       []int32 // indices of successful rows, in input order
	errKinds []string
	phases   []string
	sources  []string
	runs     []results.RunInfo
	itl, icl stats.Sample

	// Sorted samples over successful requests, nanoseconds.
	sorted   map[string][]int64
	duration int64 // ns, Σ over sources of the span
	// timeOrder is a.ok sorted by send instant, built on first use.
	timeOrder []int32
	rng       *rand.Rand
	// ev is the server's own evidence (run.json), read before the rules.
	ev *evidence
	// paths holds every successful request's parts along its path.
	paths pathParts
	// evidence counts the per-request server splits by their evidence;
	// queue says how a queue wait was inferred where the server gave none.
	evidence map[string]int
	queue    *QueueInference
	// topErrors is the most frequent messages of failed requests.
	topErrors []ErrorMessage
	// series is the run's time windows (Report.TimeSeries).
	series *TimeSeries
}

// analyse snapshots what was added so far, ready to report on.
func (c *Collector) analyse() *analysis {
	a := &analysis{
		opts: c.opts, rows: c.rows, steps: c.steps, errKinds: c.errKinds, phases: c.phases,
		sources: c.sources, runs: c.runs, itl: c.itl.Snapshot(), icl: c.icl.Snapshot(),
		sorted: map[string][]int64{}, rng: newRand(c.opts.seed()), paths: c.paths,
		topErrors: c.errs.top(topErrors),
	}
	a.ev = a.serverEvidence()
	a.ok = make([]int32, 0, len(a.rows))
	for i := range a.rows {
		if a.rows[i].ok() {
			a.ok = append(a.ok, int32(i))
		}
	}
	a.evidence = c.evidence
	a.queue = a.inferQueue()
	a.series = c.timeSeries()
	return a
}

// Report analyses what was added so far. It can be called more than once.
func (c *Collector) Report() *Report {
	a := c.analyse()
	rep := a.report(c.warmup)
	rep.Summary.Unreadable = c.unreadable
	rep.Notes = append(slices.Clone(c.notes), rep.Notes...)
	rep.Compat = c.compat.views()
	return rep
}

// report computes the Report: summary, distributions, decomposition,
// verdicts, sweep phases, the diagnosis, and the charts' data.
func (a *analysis) report(warmup int) *Report {
	rep := &Report{Schema: Schema, Sources: nonEmpty(a.sources), Runs: a.runs, TimeSeries: a.series}
	a.summary(rep, warmup)
	rep.Summary.ServerEvidence, rep.Summary.QueueInferred = a.evidence, a.queue
	rep.Summary.ServerTokens = a.serverTokens(&rep.Summary)
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
		rep.Decomposition = a.decompose(false)
		rep.TTFTSplit = a.decompose(true)
	}
	a.verdicts(rep)
	a.phaseSummaries(rep)
	rep.Sessions = a.sessions()
	rep.Notes = append(rep.Notes, a.ev.lacking(a.runs)...)
	rep.Notes = append(rep.Notes, a.stragglers()...)
	if n := a.overruns(); n > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d of %d successful requests: the server's queue + prefill exceeded the client's time before the first token (clocks that disagree); network taken as 0, the excess off the queue, then prefill", n, len(a.ok)))
	}
	rep.Notes = append(rep.Notes, evidenceNotes(rep.Summary)...)
	if t := rep.Summary.ServerTokens; t != nil && len(a.ok) > 0 {
		rep.Notes = append(rep.Notes, t.Note())
	}
	rep.Findings = diagnose(a, rep)
	if rep.Findings == nil {
		rep.Findings = []Finding{}
	}
	rep.Figures = a.figures()
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

// precompute builds and sorts the samples every report needs, one sort per
// CPU at a time: with a million requests the sorts are most of the work.
func (a *analysis) precompute() {
	if len(a.ok) == 0 {
		return
	}
	metrics := []latency.Metric{latency.TTFT, latency.TPOT, latency.E2E, latency.TTFTIntended, latency.E2EIntended, latency.ClientQueue}
	names := make([]string, len(metrics))
	samples := make([][]int64, len(metrics))
	for i, m := range metrics {
		names[i] = string(m)
		samples[i] = make([]int64, 0, len(a.ok))
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
		name latency.Metric
		gaps *stats.Sample
	}{{latency.ITL, &a.itl}, {latency.ICL, &a.icl}} {
		if g.gaps.Hist() == nil {
			names = append(names, string(g.name))
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

// timeSeries is the report's time series; nil when several inputs are
// reported together (their clocks differ) or there is nothing.
func (c *Collector) timeSeries() *TimeSeries {
	if len(nonEmpty(c.sources)) > 1 {
		return nil
	}
	ws := c.series.Windows(0)
	if len(ws) == 0 {
		return nil
	}
	ts := &TimeSeries{WidthS: c.series.Width().Seconds(), Windows: make([]SeriesPoint, len(ws))}
	var info *results.ServerInfo
	scraped := false
	for _, run := range c.runs {
		if len(run.Samples) > 0 {
			info, scraped = run.Server, true
		}
	}
	has := func(g string) bool { return scraped && (info == nil || slices.Contains(info.Series, g)) }
	for _, g := range []string{"waiting", "running", "kv_cache_usage"} {
		if has(g) {
			ts.Gauges = append(ts.Gauges, g)
		}
	}
	for i, w := range ws {
		p := SeriesPoint{StartS: w.Start.Seconds(), EndS: w.End.Seconds(), Offered: w.Offered, Completed: w.Completed,
			Failed: w.Failed, OfferedRPS: w.OfferedRPS, AchievedRPS: w.AchievedRPS, InFlight: w.InFlight,
			TTFT: windowDist(w.TTFT), TPOT: windowDist(w.TPOT), ITL: windowDist(w.ITL), E2E: windowDist(w.E2E)}
		if len(w.Failures) > 0 {
			p.Failures = make(map[string]int, len(w.Failures))
			for k, n := range w.Failures {
				p.Failures[string(k)] = n
			}
		}
		if g := w.Gauges; g.Samples > 0 {
			if has("waiting") {
				p.Waiting = &g.Waiting
			}
			if has("running") {
				p.Running = &g.Running
			}
			if has("kv_cache_usage") {
				p.KVCacheUsage = &g.KVUsage
			}
		}
		ts.Windows[i] = p
	}
	return ts
}
