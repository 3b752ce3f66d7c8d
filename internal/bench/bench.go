package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/tokentrace/tokentrace/internal/agent"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/live"
	"github.com/tokentrace/tokentrace/internal/process"
	"github.com/tokentrace/tokentrace/internal/redact"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/tracing"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// Embedded is a server bench started itself (the simulated engine).
type Embedded struct {
	URL      string
	Describe string
	// EngineFamily is the serving engine it simulates (--sim-engine:
	// vllm, sglang, trtllm, llamacpp, ollama[@version]; empty: vLLM's), recorded
	// in run.json as simulate records its own.
	EngineFamily string
	Close        func() error
}

// Config is one bench invocation.
type Config struct {
	Target Target
	// StartEmbedded starts the embedded server; used when Target.BaseURL
	// is empty.
	StartEmbedded func(ctx context.Context) (*Embedded, error)
	Workload      workload.Source
	Load          workload.Load
	// Sweep, when set, runs several phases instead of Load alone.
	Sweep *Sweep
	// BetweenCells is what a sweep does to the server before each cell
	// (BetweenCellsReset, the default, or BetweenCellsNone);
	// BetweenCellsCmd a shell command run there too.
	BetweenCells, BetweenCellsCmd string
	SLOs                          []latency.SLO
	// OutDir is the results folder (created; must not hold a run).
	OutDir string
	// Command is the exact command line; Echo the configuration as given
	// and Run the run's configuration typed (simulate.RunConfig), both
	// written to config.json (results.Config).
	Command []string
	Echo    any
	Run     any
	// Shard is this generator's share of the workload (Load is already
	// split); WorkloadID names the workload the shards split.
	Shard      workload.Shard
	WorkloadID string
	// StartAt, when set, is the instant the run's clock starts at (and
	// sending with it): the shards of a workload are given the same.
	StartAt time.Time
	// RunID, when set, prefixes the run's request ids ("<RunID>-<n>")
	// instead of one drawn from the start time: a server that draws per
	// request id (serve's fault injection) then draws the same for every
	// run.
	RunID string
	// SkipCalibration skips the loopback calibration before the run.
	SkipCalibration bool
	// Grace bounds the wait for in-flight requests after a stop.
	Grace time.Duration
	// ScrapeInterval is how often the target's /metrics is read during the
	// run, besides at its start and end: 0 means DefaultScrapeInterval,
	// a negative value only the start and the end.
	ScrapeInterval time.Duration
	// Progress, when set (a terminal), shows ProgressView on it while the
	// run goes: live.ProgressTable (the default) or live.ProgressPlain.
	Progress     io.Writer
	ProgressView string
	// Live, when set, serves the live page on it during the run (bench
	// --live); LiveWindow is the sliding window of the page and the table
	// (live.DefaultWindow when 0).
	Live       net.Listener
	LiveWindow time.Duration
	// Log receives status lines (stderr).
	Log io.Writer
	// Tools, when set, is where agent steps' tool calls go (the workload's
	// requests ask for tools).
	Tools *ToolTarget
	// Tracer, when set, records a client span per request whose context
	// is the request's traceparent (Client.Trace) and, with Tools, an
	// invoke_agent span per agent session (AgentSpans); nil sends a fresh
	// traceparent and records nothing.
	Tracer trace.Tracer
	// PromptTokenizer is what sizes generated prompts: PromptTokenizerAuto
	// (""), PromptTokenizerServer or PromptTokenizerBuiltin.
	PromptTokenizer string
	// GenAI, when set, records each measured request's OpenTelemetry GenAI
	// client metrics (tracing.NewGenAIClient: operation duration, time to
	// first chunk, token usage); nil records none.
	GenAI *tracing.GenAIServer
}

// ToolTarget is the tool endpoint of agent sessions.
type ToolTarget struct {
	// URL is POSTed each call (agent.CallRequest); empty: bench starts the
	// built-in tool simulator on a loopback port.
	URL string
	// Timeout bounds each call (agent.DefaultTimeout when 0).
	Timeout time.Duration
}

// Run executes a bench run and writes its results folder. It returns an
// error only when the run could not happen (bad configuration, no server,
// unwritable folder); failed requests are results, not errors. The text
// summary goes to out.
//
// Its phases, in order: check the configuration, reach the target
// (starting the embedded engine if there is none), open the results
// folder, measure the client's floor, measure (the run or the sweep), and
// conclude (report, verdict, summary.json, the text summary). A shard also
// measures its clock against the target's before it opens the folder, and
// waits for the agreed start instant before it sends.
func Run(ctx context.Context, cfg Config, out io.Writer) (*Result, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	r := newRun(cfg)
	defer func() { r.closePage() }() // the one servePage sets, when it did
	closeTarget, err := r.reachTarget(ctx)
	if err != nil {
		return nil, err
	}
	defer closeTarget()
	r.askEvidence(ctx)
	r.syncClock(ctx)
	if err := r.findTokenizer(ctx); err != nil {
		return nil, err
	}
	if err := r.openFolder(); err != nil {
		return nil, err
	}
	r.measureFloor(ctx)
	if err := r.measure(ctx); err != nil {
		return nil, err
	}
	return r.conclude(out)
}

// check refuses a configuration that cannot run, before anything starts.
func (c *Config) check() error {
	if c.Workload == nil {
		return errors.New("bench: no workload")
	}
	if c.Sweep == nil {
		if err := c.Load.Validate(); err != nil {
			return err
		}
	} else if err := c.Sweep.Validate(c.SLOs); err != nil {
		return err
	}
	return results.Check(c.OutDir)
}

// run is one Run's state, passed from phase to phase.
type run struct {
	cfg     Config
	log     io.Writer
	started time.Time
	target  Target
	sum     *Summary
	coll    *report.Collector
	// engineFamily is the embedded engine's simulated family (run.json).
	engineFamily string
	// The server's evidence read from its /metrics over the run.
	samples []results.ServerSample
	server  *results.ServerInfo
	// lengths sizes prompts against the server's tokenizer (when it has
	// one) and gathers the requested-against-served gap.
	lengths *lengthGaps
	// zero is the wall-clock instant the records' instants count from;
	// offset the clock's measured offset to the target's (shards).
	zero      time.Time
	offset    *ClockOffset
	offsetErr error
	// board follows the run for the live page and the table (nil without
	// either); clock is the run's.
	board *live.Board
	clock Clock
	// perfClock is TensorRT-LLM's steady clock against clock, read at the
	// run's start when whole answers are to be joined by their instants
	// (joinByTime); perfClockErr says why it could not be.
	perfClock    steadyClock
	perfClockErr error
	// closePage stops the live page's server (set by servePage).
	closePage func()
}

func newRun(cfg Config) *run {
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}
	started := time.Now()
	// Summary.Started is set when the run's clock starts: the records' zero.
	return &run{cfg: cfg, log: logw, started: started, target: cfg.Target, closePage: closeListener(cfg.Live),
		sum:  &Summary{Schema: 1, Command: strings.Join(cfg.Command, " ")},
		coll: report.NewCollector(report.Options{SLOs: cfg.SLOs})}
}

// reachTarget starts the embedded engine when there is no URL and asks the
// server for its model when none was given. The returned function stops
// what it started.
func (r *run) reachTarget(ctx context.Context) (func(), error) {
	stop := func() {}
	if r.target.BaseURL == "" {
		if r.cfg.StartEmbedded == nil {
			return nil, errors.New("bench: no --url and no embedded engine")
		}
		emb, err := r.cfg.StartEmbedded(ctx)
		if err != nil {
			return nil, fmt.Errorf("embedded engine: %w", err)
		}
		stop = func() { _ = emb.Close() }
		r.target.BaseURL = emb.URL
		r.sum.Embedded, r.engineFamily = emb.Describe, emb.EngineFamily
		fmt.Fprintf(r.log, "bench: no --url: started the embedded engine at %s\n%s\n", emb.URL, indent(emb.Describe))
	}
	if r.target.Model == "" {
		m, err := firstModel(ctx, probeClient(), r.target)
		if err != nil {
			stop()
			return nil, err
		}
		r.target.Model = m
	} else {
		warn, err := checkModel(ctx, probeClient(), r.target)
		if err != nil {
			stop()
			return nil, err
		}
		if warn != "" {
			fmt.Fprintf(r.log, "bench: warning: %s\n", warn)
		}
	}
	r.sum.Target, r.sum.Model = redact.URL(r.target.BaseURL), r.target.Model
	if r.cfg.Embedded() {
		r.sum.Target = "embedded"
	}
	return stop, nil
}

// findTokenizer looks for the server's tokenizer to size prompts with
// (--prompt-tokenizer): not for the embedded engine, whose tokenizer is
// tokentrace's own, nor when told not to. With "server" a target without
// one cannot run.
func (r *run) findTokenizer(ctx context.Context) error {
	r.lengths = &lengthGaps{}
	mode := r.cfg.PromptTokenizer
	if mode == PromptTokenizerBuiltin || r.cfg.Embedded() {
		return nil
	}
	tok, err := findServerTokenizer(ctx, r.target)
	switch {
	case err == nil:
		r.lengths.tok = tok
		fmt.Fprintf(r.log, "bench: generated prompts are sized against the server's tokenizer (%s), within %d token(s)\n", tok.Describe(), SizeTolerance)
	case mode == PromptTokenizerServer:
		return fmt.Errorf("bench: --prompt-tokenizer server: %w", err)
	default:
		r.lengths.why = err.Error()
		fmt.Fprintf(r.log, "bench: the server offers no tokenizer (%v): prompt lengths are tokentrace's; the summary reports the gap the server's usage shows\n", err)
	}
	return nil
}

// openFolder makes the results folder, once the server answered (so a run
// that cannot start leaves nothing behind), and writes the command line
// and the configuration.
func (r *run) openFolder() error {
	dir := r.cfg.OutDir
	if err := results.Prepare(dir); err != nil {
		return err
	}
	if err := results.WriteCommand(dir, r.sum.Command); err != nil {
		return err
	}
	return results.WriteConfig(dir, results.Config{Target: redacted(r.target), Config: r.cfg.Echo, Run: r.cfg.Run})
}

// measureFloor measures the client's overhead floor on this host, unless told
// not to; a failed calibration is said and the run goes on.
func (r *run) measureFloor(ctx context.Context) {
	if r.cfg.SkipCalibration {
		return
	}
	c, err := MeasureClientFloor(ctx)
	if err != nil {
		fmt.Fprintf(r.log, "bench: %v (continuing without a floor)\n", err)
		return
	}
	r.sum.Calibration = c
	fmt.Fprintf(r.log, "bench: client overhead floor on this host: %.3f ms (P99 %.3f ms, ITL jitter P99 %.3f ms)\n",
		c.FloorMS, c.TTFTErrP99MS, c.ITLErrP99MS)
}

// measure sends the load (or the sweep's points), writing each record as
// it finishes and feeding the report's collector, and judges the client's
// own health over it.
func (r *run) measure(ctx context.Context) (err error) {
	w, err := results.CreateRecords(r.cfg.OutDir)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := w.Close(); err == nil {
			err = cerr
		}
	}()
	clock := r.startClock()
	r.clock = clock
	if r.target.AnswerID && !r.target.Stream {
		r.perfClock, r.perfClockErr = readSteadyClock(ctx, r.target, func() int64 { return int64(clock.Now()) })
	}
	client, err := NewClient(r.target, func() int64 { return int64(clock.Now()) }, 0)
	if err != nil {
		return err
	}
	defer client.Close()
	if r.cfg.Tracer != nil {
		client.Trace(r.cfg.Tracer, r.zero)
	}
	tools, closeTools, err := r.toolCaller(func() int64 { return int64(clock.Now()) })
	if err != nil {
		return err
	}
	defer closeTools()
	late := newLateness(clock)
	watch := newServerWatch(r.target, func() int64 { return int64(clock.Now()) })
	r.board = r.newBoard(watch, late)
	r.servePage()
	runner := &Runner{late: late,
		Tools: tools, Prepare: r.lengths.prepare,
		Doer: client, Source: r.cfg.Workload, Clock: clock, RunID: r.runID(), Grace: r.cfg.Grace, Board: r.board,
		Epoch: !r.cfg.StartAt.IsZero(),
	}
	sink := &recordSink{r: r, w: w}
	runner.Emit = sink.take
	if r.cfg.Tracer != nil && tools != nil {
		runner.Agents = &AgentSpans{Tracer: r.cfg.Tracer, Epoch: r.zero, RunID: runner.RunID, Model: r.target.Model}
	}
	fmt.Fprintf(r.log, "bench: %s, model %q, %s\n", client.URL(), r.target.Model, describeLoad(r.cfg))
	stopLive := r.showLive()
	stopWatch := watch.start(ctx, r.cfg.ScrapeInterval)
	if late := clock.Now(); !r.cfg.StartAt.IsZero() && late > 0 {
		stopLive()
		stopWatch()
		return fmt.Errorf("bench: the start instant %s passed %s before this generator was ready: give a later --shard-start-at",
			r.cfg.StartAt.Format(time.RFC3339Nano), late.Round(time.Millisecond))
	}
	usage0, gc0, wall0 := process.SelfCPU(), gcPauses(), time.Now()
	stopLate := late.start(ctx)
	err = r.send(ctx, runner)
	stopLate()
	stopLive()
	stopWatch()
	r.samples, r.server = watch.result()
	var perfWarnings []string
	if r.target.AnswerID {
		perfWarnings = r.joinHeld(ctx, sink.held)
		for _, rec := range sink.held {
			sink.emit(rec)
		}
	}
	if err != nil {
		return err
	}
	r.sum.Interrupted = ctx.Err() != nil
	r.judgeClient(process.SelfCPU()-usage0, time.Since(wall0), gc0, late, perfWarnings)
	return nil
}

// recordSink is where a run's records go as they finish: the records
// file, the live board (which feeds the collector) or the collector, the
// GenAI metrics and the count. TensorRT-LLM's records are joined after
// the run (joinHeld): until then they are held, and written at its end.
type recordSink struct {
	r    *run
	w    *results.RecordWriter
	held []*latency.Record
}

// take is the runner's Emit: a finished record, written or held.
func (s *recordSink) take(rec *latency.Record) {
	s.r.lengths.add(rec)
	if !s.r.target.AnswerID {
		s.emit(rec)
		return
	}
	c := *rec
	s.held = append(s.held, &c)
}

// emit writes a record and feeds it to the run's views.
func (s *recordSink) emit(rec *latency.Record) {
	r := s.r
	s.w.Write(rec)
	if r.board != nil {
		r.board.Done(rec) // the board feeds r.coll, off the record path
	} else {
		r.coll.Add(rec)
	}
	r.genAI(rec)
	r.sum.Records++
}

// judgeClient sets the client's health over the run (cpu and wall its
// use, gc0 the GC pauses before it) and every warning of its own: its
// timekeeping, the performance join's and the prompts'.
func (r *run) judgeClient(cpu, wall time.Duration, gc0 *metrics.Float64Histogram, late *lateness, perfWarnings []string) {
	r.sum.Client = health(cpu, wall, gc0, gcPauses(), r.sum.Phases, r.sum.Calibration)
	r.sum.Client.Timekeeping = late.result()
	r.sum.Client.Warnings = append(r.sum.Client.Warnings, r.sum.Client.Timekeeping.warnings()...)
	r.sum.Client.Warnings = append(r.sum.Client.Warnings, perfWarnings...)
	r.sum.Prompts = r.lengths.result()
	r.sum.Client.Warnings = append(r.sum.Client.Warnings, r.sum.Prompts.warnings(r.lengths.firstErr)...)
}

// toolCaller is the caller of agent steps' tool calls, starting the
// built-in tool simulator when no endpoint was given; nil without agent
// sessions. The returned function stops what it started.
func (r *run) toolCaller(now func() int64) (ToolCaller, func(), error) {
	tt := r.cfg.Tools
	if tt == nil {
		return nil, func() {}, nil
	}
	url, stop := tt.URL, func() {}
	if url == "" {
		srv, err := agent.StartSimulator(&agent.Simulator{})
		if err != nil {
			return nil, nil, err
		}
		url, stop = srv.URL(), func() { _ = srv.Close() }
		fmt.Fprintf(r.log, "bench: no --tool-url: started the tool simulator at %s\n", url)
	}
	c, err := agent.NewCaller(url, tt.Timeout, nil, now)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return c, func() { c.Close(); stop() }, nil
}

// newBoard makes the board the live page and the terminal view show,
// fed the server's gauges and bench's timekeeping warnings; nil when
// neither is asked for.
func (r *run) newBoard(watch *serverWatch, late *lateness) *live.Board {
	if r.cfg.Live == nil && (r.cfg.Progress == nil || r.cfg.ProgressView == live.ProgressOff) {
		return nil
	}
	return live.New(live.Config{Window: r.cfg.LiveWindow, Collector: r.coll, Report: report.Options{SLOs: r.cfg.SLOs}, CPU: process.SelfCPU,
		Gauges: watch.latest, Warnings: func() []string { return late.result().warnings() }})
}

// closeListener closes the live page's listener of a run that did not
// get to serve it.
func closeListener(ln net.Listener) func() {
	return func() {
		if ln != nil {
			_ = ln.Close()
		}
	}
}

// servePage serves the live page on cfg.Live until closePage, which the
// run calls once the board's last snapshot is out (or the run failed).
func (r *run) servePage() {
	ln := r.cfg.Live
	if ln == nil || r.board == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.board.Serve(ctx, ln); err != nil {
			fmt.Fprintf(r.log, "bench: live page: %v\n", err)
		}
	}()
	fmt.Fprintf(r.log, "bench: live page at http://%s/\n", ln.Addr())
	r.closePage = func() { cancel(); <-done }
}

// showLive runs the board and draws the terminal view while the run
// goes, when there is a terminal to draw it on; the returned function
// ends both (the board's last snapshot is Finish's, in conclude).
func (r *run) showLive() func() {
	if r.board == nil {
		return func() {}
	}
	lctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.board.Run(lctx, func() int64 { return int64(r.clock.Now()) })
	}()
	if view := r.cfg.ProgressView; r.cfg.Progress != nil && view != live.ProgressOff {
		if view == "" {
			view = live.ProgressTable
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.board.Show(lctx, r.cfg.Progress, view, "bench:")
		}()
	}
	return func() { cancel(); wg.Wait() }
}

// send runs the load as one phase, or the sweep's points as phases; a
// stopped sweep is a result, not an error.
func (r *run) send(ctx context.Context, runner *Runner) error {
	if r.cfg.Sweep == nil {
		res, err := runner.Run(ctx, "", r.cfg.Load)
		r.sum.Phases = append(r.sum.Phases, res)
		return err
	}
	oc, err := runSweep(ctx, runner, r.cfg, r.cellPrep(), r.log, &r.sum.Phases)
	r.sum.Sweep = oc
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// conclude writes run.json, builds the report, judges the SLOs, writes
// summary.json and prints the text summary.
func (r *run) conclude(out io.Writer) (*Result, error) {
	// The streams' stacks and buffers, freed with them, go back to the
	// OS before the report is built: they are most of the process's
	// memory at thousands of streams, and the report's tables would be
	// laid on top of them.
	debug.FreeOSMemory()
	info := r.runInfo()
	if err := results.WriteRunInfo(r.cfg.OutDir, info); err != nil {
		return nil, err
	}
	var rep *report.Report
	if r.board != nil {
		rep = r.board.Finish(int64(r.clock.Now()), info) // the page's last numbers are this report's
	} else {
		r.coll.SetRun(info)
		rep = r.coll.Report()
	}
	sum := r.sum
	sum.Report = rep
	sum.Compat = rep.Compat
	if e := sum.Evidence; e != nil {
		e.Returned, e.Succeeded = rep.Summary.ServerEvidence, rep.Summary.Succeeded
		if e.Field != "" {
			e.Requests = sum.Records
		}
	}
	sum.SLOsFailed = r.slosFailed(rep)
	if err := results.WriteSummary(r.cfg.OutDir, sum); err != nil {
		return nil, err
	}
	if sum.Interrupted {
		fmt.Fprintf(out, "INTERRUPTED: the run was stopped before its end; what follows covers the %d requests that finished\n\n", rep.Summary.Requests)
	}
	if err := rep.WriteText(out); err != nil {
		return nil, err
	}
	writeBenchText(out, sum, r.cfg.OutDir)
	return &Result{Summary: sum, Report: rep, OutDir: r.cfg.OutDir}, nil
}

// runInfo is what the report is told about the run (run.json).
func (r *run) runInfo() results.RunInfo {
	sum, l := r.sum, r.cfg.Load
	info := results.RunInfo{Target: sum.Target, Model: r.target.Model, Mode: l.Mode(),
		Duration: l.Duration, OfferedRate: l.Rate, Concurrency: l.Concurrency, RampUp: l.RampName(), Interrupted: sum.Interrupted,
		Warnings: sum.Client.Warnings, Samples: r.samples, Server: r.server, EngineFamily: r.engineFamily}
	if sum.Sweep == nil && l.Duration == 0 {
		info.Planned = l.Requests
	}
	if sum.Calibration != nil {
		info.OverheadFloor = time.Duration(sum.Calibration.FloorMS * 1e6)
	}
	if sum.Sweep != nil {
		info.Points = sum.Sweep.points()
		info.Mode = sum.Sweep.mode()
	}
	info.Shard = r.shardInfo()
	if info.Shard != nil && info.Shard.StartAt.IsZero() {
		info.Warnings = append(info.Warnings, "shard without --shard-start-at: its schedule began when it started, not with the other shards'")
	}
	if r.offsetErr != nil {
		info.Warnings = append(info.Warnings, fmt.Sprintf("clock offset to the target not measured: %v", r.offsetErr))
	}
	return info
}

// syncClock measures a shard's wall clock against the target's, the
// reference the shards share; a failure is noted and the run goes on.
func (r *run) syncClock(ctx context.Context) {
	if !r.cfg.Shard.Sharded() {
		return
	}
	off, err := MeasureClockOffset(ctx, r.target)
	if err != nil {
		r.offsetErr = err
		fmt.Fprintf(r.log, "bench: clock offset to the target not measured: %v\n", err)
		return
	}
	r.offset = &off
	fmt.Fprintf(r.log, "bench: shard %s: the target's clock is %s ± %s from this host's\n",
		r.cfg.Shard, off.Offset.Round(time.Microsecond), off.Uncertainty.Round(time.Microsecond))
}

// startClock starts the run's clock: at the agreed instant when one was
// given (Now is negative until then), else now. That instant is the
// records' zero and summary.json's started: a record's instant t
// happened at started + t.
func (r *run) startClock() Clock {
	var c Clock
	if at := r.cfg.StartAt; !at.IsZero() {
		r.zero, c = at, newRealClockAt(at)
	} else {
		r.zero = time.Now()
		c = &realClock{start: r.zero}
	}
	r.sum.Started = r.zero.UTC()
	return c
}

// runID prefixes the run's request ids; a shard's name their shard.
func (r *run) runID() string {
	id := r.cfg.RunID
	if id == "" {
		id = runID(r.started)
	}
	if sh := r.cfg.Shard; sh.Sharded() {
		id += fmt.Sprintf("s%d", sh.Index)
	}
	return id
}

// shardInfo is a shard's part of run.json: which share, of which
// workload, and where its clock stands.
func (r *run) shardInfo() *results.ShardInfo {
	sh := r.cfg.Shard
	if !sh.Sharded() {
		return nil
	}
	host, _ := os.Hostname()
	si := &results.ShardInfo{Index: sh.Index, Count: sh.Count, Workload: r.cfg.WorkloadID,
		StartUnixNS: r.zero.UnixNano(), StartAt: r.cfg.StartAt, Host: host}
	if r.offset != nil {
		si.ClockOffsetNS, si.ClockUncertaintyNS = int64(r.offset.Offset), max(int64(r.offset.Uncertainty), 1)
	} else if r.offsetErr != nil {
		si.ClockError = r.offsetErr.Error()
	}
	return si
}

// slosFailed is the run's verdict. A sweep's records pool several loads:
// its verdict is whether any point met the SLOs (for a capacity search,
// whether one was found).
func (r *run) slosFailed(rep *report.Report) bool {
	if r.sum.Sweep == nil || len(r.cfg.SLOs) == 0 {
		return slosFailed(rep, r.cfg.SLOs)
	}
	for _, p := range r.sum.Sweep.Points {
		if p.SLOsHold != nil && *p.SLOsHold {
			return false
		}
	}
	return true
}

// Embedded reports whether the run targets the embedded engine.
func (c *Config) Embedded() bool { return c.Target.BaseURL == "" }

func slosFailed(rep *report.Report, slos []latency.SLO) bool {
	if len(slos) == 0 {
		return false
	}
	if len(rep.SLOs) == 0 {
		return true
	}
	for _, v := range rep.SLOs {
		if v.Status != report.StatusPass {
			return true
		}
	}
	return false
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

func runID(t time.Time) string { return fmt.Sprintf("tt%x", t.UnixNano()&0xffffffffff) }

// redacted is t as config.json records it: its API key, its URL's
// userinfo and the credentials of its headers (redact.Header) masked.
func redacted(t Target) Target {
	t.BaseURL = redact.URL(t.BaseURL)
	if t.APIKey != "" {
		t.APIKey = redact.Mask
	}
	t.Headers = redact.Header(t.Headers)
	return t
}

// describeLoad is the run's schedule in words: the sweep's, or the load's
// (workload.Load.Describe).
func describeLoad(cfg Config) string {
	if cfg.Sweep != nil {
		return cfg.Sweep.String()
	}
	return cfg.Load.Describe()
}

// genAI feeds a measured request to the GenAI client metrics: the
// operation's duration (E2E), time to first chunk (TTFT, the first token of
// any kind) and usage; a failed request's duration with error.type its
// kind.
func (r *run) genAI(rec *latency.Record) {
	if r.cfg.GenAI == nil || rec.Warmup {
		return
	}
	req := tracing.GenAIRequest{Operation: r.target.genAIOperation(), Model: rec.Model, InputTokens: rec.InputTokens,
		OutputTokens: rec.OutputTokens + rec.ReasoningTokens}
	if e2e, ok := rec.E2E(); ok {
		req.Duration = e2e
	}
	if !rec.OK() {
		req.ErrorType = string(rec.ErrorKind)
	} else if ttft, ok := rec.TTFT(); ok && rec.Stream {
		req.TTFT = ttft
	}
	r.cfg.GenAI.Record(context.Background(), req)
}

// ms converts nanoseconds to milliseconds.
func ms(ns int64) float64 { return float64(ns) / 1e6 }
