package report

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/stats"
	"github.com/tokentrace/tokentrace/internal/window"
)

// Options configures a report.
type Options struct {
	// SLOs are judged against the run (verdicts, goodput, attainment).
	SLOs []latency.SLO
	// Seed seeds the bootstrap's random source; 0 means 1. The same seed
	// and records always give the same intervals.
	Seed uint64
	// Resamples is the number of bootstrap resamples; 0 means 2,000.
	Resamples int
	// IncludeWarmup keeps records marked Warmup (left out by default).
	IncludeWarmup bool
	// GPUs is how many GPUs served the run: a sweep's Pareto front divides
	// its token throughput by it. 0: per replica (the target taken as one).
	GPUs int
}

func (o Options) seed() uint64 {
	if o.Seed == 0 {
		return 1
	}
	return o.Seed
}

func (o Options) resamples() int {
	if o.Resamples <= 0 {
		return 2000
	}
	return o.Resamples
}

// itlExactCap is how many inter-token gaps are kept one by one; past it
// they go to a histogram with 0.05 % resolution, so memory stays bounded.
var itlExactCap = 1 << 21

const (
	flagServer uint8 = 1 << iota // the server gave its own split
	flagStream
	flagTruncated // the answer ended with finish_reason "length"
	// flagQueueInferred: the server's split gives no queue wait
	// (llama.cpp's timings, Ollama's durations); the analysis infers it
	// (analysis.inferQueue).
	flagQueueInferred
	flagResent // sent again after a stale keep-alive connection
)

// row is the compact part of a Record that a report needs: about 170 bytes
// per request, whatever the length of the answer.
type row struct {
	// The request's ID is ids[idOff:idOff+idLen] of its collector (or
	// digest): a row holds no pointer, so the collector's million rows are
	// not scanned by the garbage collector.
	idOff, idLen                         uint32
	intended, sent, wrote, firstTok, end int64
	connect, gateway                     int64
	sq, prefill, decode                  int64 // server split
	load                                 int64 // the engine's model load before prefill
	stallAt, stall                       int64 // start and length of the largest chunk gap
	itlMax                               int64
	input, output, cached, turn, nchunks int32
	shared                               int32 // prompt tokens shared with other requests
	reasoning                            int32 // reasoning tokens before the answer
	firstReason                          int64 // first reasoning token; 0: none
	session                              int64
	src, phase                           uint16
	errKind                              uint8 // index into Collector.errKinds; 0 = success
	flags                                uint8
	// The request's parts along its path (partTable): plen of them from
	// poff, their own TTFT values from toff.
	poff, toff uint32
	plen       uint8
}

func (r *row) ok() bool        { return r.errKind == 0 && r.end > 0 }
func (r *row) hasServer() bool { return r.flags&flagServer != 0 }

// Collector accumulates records one at a time and keeps only the compact
// per-request numbers a report needs; bench feeds it as requests finish and
// Load feeds it from files. It is not safe for concurrent use.
//
// Its methods are in this file, but for Report (analysis.go), which
// analyses what it holds, and WriteCSV (csv.go), which writes its rows.
type Collector struct {
	opts Options

	rows     []row
	ids      []byte    // the rows' IDs, one after the other
	steps    []stepRow // the requests of sessions, for Report.Sessions
	itl, icl stats.Sample
	errKinds []string
	errIndex map[string]uint8
	phases   []string
	phaseIdx map[string]uint16
	sources  []string
	src      uint16
	runs     []results.RunInfo
	notes    []string
	warmup   int
	// unreadable counts the input lines that were not records.
	unreadable int
	paths      pathParts // every request's parts along its path
	// evidence counts the successful requests whose server split came
	// from each kind of evidence (latency.ServerSplit's Source, with its
	// Engine when it names one).
	evidence map[string]int
	compat   compatAgg // the compatibility views (Report.Compat)
	errs     errTally  // failed requests by message (Summary.TopErrors)
	one      *digest   // scratch for Add
	// series is the run's time windows (Report.TimeSeries).
	series *window.Series
	// shift is added to the instants of the rows absorbed (a shard's, to
	// put them on the merged run's clock).
	shift int64
}

// NewCollector returns an empty collector.
func NewCollector(opts Options) *Collector {
	return &Collector{
		opts:     opts,
		errKinds: []string{""},
		errIndex: map[string]uint8{"": 0},
		phases:   []string{""},
		phaseIdx: map[string]uint16{"": 0},
		sources:  []string{""},
		itl:      stats.Sample{ExactCap: itlExactCap},
		icl:      stats.Sample{ExactCap: itlExactCap},
		series:   newSeries(),
	}
}

// SetRun attaches the load generator's metadata for the current source.
// The server's scrapes it carries join the time series.
func (c *Collector) SetRun(info results.RunInfo) {
	c.runs = append(c.runs, info)
	c.addGauges(info)
}

// Note adds a line to the report's notes (what was dropped, what is missing).
func (c *Collector) Note(s string) { c.notes = append(c.notes, s) }

// source starts a new input (a file or folder); records added after it
// belong to it.
func (c *Collector) source(name string) {
	if len(c.sources) == 1 && c.sources[0] == "" && len(c.rows) == 0 {
		c.sources[0] = name
		return
	}
	c.sources = append(c.sources, name)
	c.src = uint16(len(c.sources) - 1)
}

// Add records one request. Only its compact numbers are kept.
func (c *Collector) Add(r *latency.Record) {
	if c.one == nil {
		c.one = &digest{}
	}
	d := c.one
	d.reset()
	d.shift = c.shift
	d.series = c.series // one record: counted in place, not merged
	d.add(r, c.opts.IncludeWarmup)
	c.absorb(d)
	d.series = nil // not to be reset with the digest
}

// LastITLs returns the inter-token gaps (latency.Record.ITLs) that Add
// computed for r, when r is the record Add was last given and a success
// it kept; else nil and false. The slice is the collector's: read it
// before the next Add, do not change it. The live board counts them
// rather than computing them again.
func (c *Collector) LastITLs(r *latency.Record) ([]int64, bool) {
	if c.one == nil || c.one.gapsOf != r {
		return nil, false
	}
	return c.one.itl[c.one.gapsAt:], true
}

// reserve makes room for a digest's rows and parts and, when the storage
// must grow, for the more rows expected after them (and their parts, at
// the rate so far). Growing once to the expected size rather than by
// append's steps spares a million-row input the copies from each slice to
// the next and the memory both hold while one is copied.
func (c *Collector) reserve(d *digest, more int) {
	n := len(d.rows)
	c.rows = growTo(c.rows, n, more)
	rows := len(c.rows) + n
	c.ids = growTo(c.ids, len(d.ids), more*len(d.ids)/max(n, 1))
	extra := func(have, add int) int { return int(float64(more) * float64(have+add) / float64(max(rows, 1))) }
	pp := &c.paths
	add := len(d.paths.pk)
	m := extra(len(pp.pk), add)
	pp.pk, pp.e2e = growTo(pp.pk, add, m), growTo(pp.e2e, add, m)
	add = len(d.paths.ttft)
	pp.ttft = growTo(pp.ttft, add, extra(len(pp.ttft), add))
}

// growTo returns s with room for n more elements: s itself when it has
// it, else a copy with room for exactly n + more (append's own steps
// overshoot by up to a quarter, or double).
func growTo[E any](s []E, n, more int) []E {
	if len(s)+n <= cap(s) {
		return s
	}
	if more == 0 {
		return slices.Grow(s, n)
	}
	t := make([]E, len(s), len(s)+n+more)
	copy(t, s)
	return t
}

// absorb merges a digest (a batch of records reduced in parallel) into the
// collector, in order.
func (c *Collector) absorb(d *digest) {
	c.warmup += d.warmup
	kinds := make([]uint8, len(d.kinds))
	for i, k := range d.kinds {
		if _, known := c.errIndex[k]; !known && len(c.errKinds) >= 250 {
			k = "other" // error kinds are a small fixed set; guard against odd inputs
		}
		kinds[i] = c.kind(k)
	}
	phases := make([]uint16, len(d.phases))
	for i, p := range d.phases {
		idx, ok := c.phaseIdx[p]
		if !ok {
			if len(c.phases) >= 60000 {
				p = "other"
			}
			if idx, ok = c.phaseIdx[p]; !ok {
				idx = uint16(len(c.phases))
				c.phases = append(c.phases, p)
				c.phaseIdx[p] = idx
			}
		}
		phases[i] = idx
	}
	c.paths.absorb(&d.paths, d.rows)
	ids := c.idBase(d)
	for _, w := range d.rows {
		w.idOff += ids
		w.errKind = kinds[w.errKind]
		w.phase = phases[w.phase]
		w.src = c.src
		if c.shift != 0 {
			w.shift(c.shift)
		}
		c.rows = append(c.rows, w)
	}
	for _, st := range d.steps {
		st.src = c.src
		c.steps = append(c.steps, st)
	}
	for k, n := range d.evidence {
		if c.evidence == nil {
			c.evidence = map[string]int{}
		}
		c.evidence[k] += n
	}
	c.itl.AddBatch(d.itl, &d.itlHist)
	c.icl.AddBatch(d.icl, &d.iclHist)
	c.compat.merge(&d.compat)
	c.errs.merge(&d.errs)
	if d.series != nil && d.series != c.series {
		c.series.Merge(d.series)
	}
}

// idBase appends a digest's IDs to the collector's and returns the offset
// of the first. Past 4 GiB of IDs, the rows that follow keep none.
func (c *Collector) idBase(d *digest) uint32 {
	if len(c.ids)+len(d.ids) > math.MaxUint32 {
		for i := range d.rows {
			d.rows[i].idOff, d.rows[i].idLen = 0, 0
		}
		return 0
	}
	base := uint32(len(c.ids))
	c.ids = append(c.ids, d.ids...)
	return base
}

// id is row w's request ID.
func (c *Collector) id(w *row) string { return string(c.ids[w.idOff : w.idOff+w.idLen]) }

func (c *Collector) kind(k string) uint8 {
	if i, ok := c.errIndex[k]; ok {
		return i
	}
	i := uint8(len(c.errKinds))
	c.errKinds = append(c.errKinds, k)
	c.errIndex[k] = i
	return i
}

// readInput reads one records file into c: as a source of its own, or
// (a shard) into the current one, its instants shifted onto the common
// clock. It returns the records read and the lines it could not read.
func (c *Collector) readInput(ctx context.Context, in input, ownSource, several bool) (int, unreadable, error) {
	info := in.info
	if ownSource {
		c.source(results.SourceName(in.file))
	} else {
		info = in.shifted()
	}
	if in.has {
		c.SetRun(info)
	} else if ownSource {
		c.Note(fmt.Sprintf("%s: no %s beside it: the run may have been cut short (bench writes it when the run ends); "+
			"its configuration, warnings and the server's evidence are unknown", in.file, results.RunInfoFile))
	}
	c.shift = in.shift
	before := len(c.rows)
	n, u, err := readFile(ctx, c, in.file)
	if err != nil {
		return n, u, err
	}
	if n == 0 {
		c.Note(fmt.Sprintf("%s holds no records", in.file))
	}
	c.cutShort(in.file, info, len(c.rows)-before)
	if several {
		u.first = in.file + " " + u.first
	}
	return n, u, nil
}

// cutShort notes a results file whose run.json says it was cut short:
// interrupted, or holding fewer measured records than it planned.
func (c *Collector) cutShort(file string, info results.RunInfo, measured int) {
	switch {
	case info.Interrupted:
		c.Note(fmt.Sprintf("%s: the run was interrupted: %d measured records of %s; "+
			"its numbers cover the requests that finished", file, measured, plannedWords(info.Planned)))
	case info.Planned > 0 && measured < info.Planned:
		c.Note(fmt.Sprintf("%s: %d measured records of the %d planned: the run was cut short; "+
			"its numbers cover the requests that finished", file, measured, info.Planned))
	}
}

func plannedWords(n int) string {
	if n == 0 {
		return "an unknown number planned"
	}
	return fmt.Sprintf("%d planned", n)
}

// addGauges counts a run's scrapes in the series.
func (c *Collector) addGauges(info results.RunInfo) {
	for _, s := range info.Samples {
		c.series.AddGauge(window.Gauge{At: time.Duration(s.AtNS), Waiting: s.Waiting, Running: s.Running, KVUsage: s.KVCacheUsage})
	}
}
