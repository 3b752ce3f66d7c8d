package live

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// Defaults of Config's zero fields.
const (
	DefaultWindow = 10 * time.Second
	DefaultTick   = time.Second
	// minReportEvery bounds how often the since-start numbers and the
	// findings are recomputed, whatever their cost.
	minReportEvery = 2 * time.Second
	// reportBudget bounds the share of the time the since-start
	// computation may take: after one that took d, the next waits
	// reportBudget × d (0.1 % of the time).
	reportBudget = 1000
	// cpuBudget bounds its share of the process's CPU time, with
	// Config.CPU: the next waits until the process has spent cpuBudget ×
	// its expected CPU cost (the last one's per record × the records
	// now) since the last (0.33 %).
	cpuBudget   = 300
	maxHistory  = 600 // points kept (10 minutes at the default tick)
	maxWarnings = 5
)

// Config is a Board's configuration.
type Config struct {
	// Window is the sliding window's width (DefaultWindow when 0), rounded
	// up to whole seconds; Tick how often a snapshot is computed
	// (DefaultTick when 0).
	Window, Tick time.Duration
	// Collector, when set, is the run's report collector: the board feeds
	// it (on its own goroutine, off the record path) and Finish returns
	// the run's report from it. Nil: the board makes one with Report.
	Collector *report.Collector
	// Report is the run's report options: its SLOs are drawn (and are the
	// collector's).
	Report report.Options
	// Gauges, when set, returns the server's last scraped sample.
	Gauges func() (results.ServerSample, bool)
	// Warnings, when set, returns the run's warnings so far (bench's
	// timekeeping).
	Warnings func() []string
	// CPU, when set, returns the process's CPU time so far: the
	// since-start computation is then budgeted against it too (0 where
	// the platform cannot tell: the wall-time budget alone).
	CPU func() time.Duration

	// Gateway makes the board the gateway's view (gateway /live): records
	// come through Offer, bounded by Queue (DefaultQueue when 0), their
	// Timing is the split; there is no report (no since-start numbers nor
	// findings: a gateway runs without end); the snapshot has each pool's
	// and upstream's figures, a pool's admission read from Pools at each
	// tick.
	Gateway bool
	Queue   int
	Pools   func() []PoolState
}

// Board follows a run as it goes; see the package's doc. Sent and Done may
// be called from any goroutine; Run and Finish from one.
type Board struct {
	cfg        Config
	sent, done atomic.Int64
	failed     atomic.Int64
	dropped    atomic.Int64 // records Offer dropped
	queued     atomic.Int64 // the batch's length as Offer last left it
	watchers   atomic.Int64 // open /events streams and terminal views
	events     atomic.Int64 // snapshots the streams sent (Streams)
	coalesced  atomic.Int64 // snapshots the streams skipped

	mu    sync.Mutex // guards batch: held for an append or a swap
	batch []entry

	agg  aggregator
	cur  atomic.Pointer[published]
	subs subscribers
}

// published is one snapshot and its encoding without history (the events
// after a client's first).
type published struct {
	snap  *Snapshot
	delta []byte
	full  struct {
		once sync.Once
		b    []byte
	}
}

// New returns a board; its first snapshot is empty.
func New(cfg Config) *Board {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Tick <= 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	b := &Board{cfg: cfg}
	b.agg.init(cfg)
	s, _ := b.agg.snapshot(0, b.counts(), false)
	b.publish(s)
	return b
}

// Sent counts a request sent.
func (b *Board) Sent() { b.sent.Add(1) }

// Done hands over a finished record, which must not change afterwards.
// Call it in the order the report's collector is fed (bench calls it
// beside Collector.Add), so that the since-start numbers are the report's.
func (b *Board) Done(rec *latency.Record) {
	b.mu.Lock()
	b.batch = append(b.batch, entry{rec: rec})
	b.mu.Unlock()
	b.done.Add(1)
	if !rec.OK() {
		b.failed.Add(1)
	}
}

// counts reads the counters.
func (b *Board) counts() counts {
	return counts{sent: b.sent.Load(), done: b.done.Load(), failed: b.failed.Load(), dropped: b.dropped.Load(),
		watched: b.watchers.Load() > 0}
}

// watch counts a viewer (an /events stream, a terminal view) until the
// returned function is called: the since-start numbers and findings are
// recomputed mid-run only while one watches.
func (b *Board) watch() func() {
	b.watchers.Add(1)
	var once sync.Once
	return func() { once.Do(func() { b.watchers.Add(-1) }) }
}

// Run computes a snapshot every tick, on the run's clock now (nanoseconds
// since its start), until ctx ends.
func (b *Board) Run(ctx context.Context, now func() int64) {
	t := time.NewTicker(b.cfg.Tick)
	defer t.Stop()
	if b.cfg.Gateway {
		defer b.subs.end() // the gateway's view ends with it
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			b.step(now(), false)
		}
	}
}

// Finish takes in every record handed over and the run's run.json, and
// returns the run's report (from the collector: Config.Collector's when
// given); the last snapshot's since-start numbers and findings are that
// report's. Call it once Run has returned.
func (b *Board) Finish(at int64, info results.RunInfo) *report.Report {
	if b.agg.coll == nil { // the gateway's view
		b.step(at, true)
		b.subs.end()
		return nil
	}
	b.agg.coll.SetRun(info)
	rep := b.step(at, true)
	b.subs.end()
	return rep
}

// Step publishes a snapshot at instant now of what was handed over so
// far, as Run does on each tick: call it where Run is not running (a
// test's clock).
func (b *Board) Step(now int64) { b.step(now, false) }

// step drains the batch and publishes a snapshot at instant now; it
// returns the report when it computed one.
func (b *Board) step(now int64, final bool) *report.Report {
	b.mu.Lock()
	recs := b.batch
	b.batch = b.agg.spare[:0]
	b.queued.Store(0)
	b.mu.Unlock()
	c := b.counts()
	for _, e := range recs {
		b.agg.add(e.rec)
		if b.cfg.Gateway {
			b.agg.addGroups(e)
		}
	}
	clear(recs) // let the records go
	b.agg.spare = recs
	s, rep := b.agg.snapshot(now, c, final)
	b.publish(s)
	return rep
}

// publish makes s the current snapshot and tells the streams.
func (b *Board) publish(s *Snapshot) {
	p := &published{snap: s}
	d := *s
	if n := len(d.History); n > 1 {
		d.History = d.History[n-1:]
	}
	p.delta, _ = json.Marshal(&d) // a Snapshot always encodes
	b.cur.Store(p)
	b.subs.notify()
}

// Latest returns the current snapshot; it must not be changed.
func (b *Board) Latest() *Snapshot { return b.cur.Load().snap }

// fullJSON is the current snapshot's encoding with its whole history.
func (p *published) fullJSON() []byte {
	p.full.once.Do(func() { p.full.b, _ = json.Marshal(p.snap) })
	return p.full.b
}

// counts are the record path's counters at one instant, and whether
// anyone watches.
type counts struct {
	sent, done, failed, dropped int64
	watched                     bool
}

// aggregator is the board's state that only its own goroutine touches.
type aggregator struct {
	cfg      Config
	win      *slots
	ws       windowStats
	coll     *report.Collector // nil in the gateway's view
	spare    []entry
	groups   map[groupKey]*group // the gateway's pools and upstreams
	gws      windowStats         // scratch for a group's window
	failures map[string]int64
	ok       int64
	ttft     stats.Sketch // every record's TTFT (the plain line)
	phase    string
	seq      int64
	added    int64  // records taken in
	reported int64  // records the last since-start computation covered
	ticks    []tick // the counters at each tick within the window
	history  []Point
	// The since-start part, recomputed on its own cadence.
	since      Figures
	sinceAt    int64
	findings   []Finding
	phases     []PhaseRow
	nextReport int64
	lastCPU    time.Duration // the process's CPU time after the last one
	perRecord  float64       // the last one's CPU cost per record (ns)
}

// tick is the counters at one snapshot.
type tick struct{ at, sent, ok int64 }

func (a *aggregator) init(cfg Config) {
	a.cfg, a.win = cfg, newSlots(cfg.Window)
	a.coll = cfg.Collector
	if cfg.Gateway {
		a.win.own, a.coll, a.groups = true, nil, map[groupKey]*group{}
	} else if a.coll == nil {
		a.coll = report.NewCollector(cfg.Report)
	}
	if a.coll != nil {
		a.win.gaps = a.coll.LastITLs // add feeds the collector first
	}
	a.failures = map[string]int64{}
	a.findings = []Finding{}
	a.ticks = []tick{{}}
}

// add takes one record in.
func (a *aggregator) add(rec *latency.Record) {
	a.added++
	if a.coll != nil {
		a.coll.Add(rec)
	}
	a.win.add(rec)
	if rec.Phase != "" {
		a.phase = rec.Phase
	}
	if kind := failKind(rec); kind != "" {
		if !rec.Warmup {
			a.failures[string(kind)]++
		}
		return
	}
	a.ok++
	if d, ok := rec.TTFT(); ok {
		a.ttft.Add(int64(d))
	}
}
