// Package bench is `tokentrace bench`: a load generator for any
// OpenAI-compatible server whose numbers are right. It schedules requests
// on absolute instants (open loop at a rate, closed loop at a concurrency,
// or both), timestamps bytes as they arrive, records one latency.Record
// per request in requests.jsonl as each finishes, and summarises the run
// with internal/report, the same code as `tokentrace report`.
//
// docs/bench.md is the user's guide; docs/metrics.md defines every number.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"syscall"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/stats"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// Embedded is a server bench started itself (the simulated engine).
type Embedded struct {
	URL      string
	Describe string
	Close    func() error
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
	SLOs  []latency.SLO
	// OutDir is the results folder (created; must not hold a run).
	OutDir string
	// Command is the exact command line; Echo the configuration as given,
	// written to config.json.
	Command []string
	Echo    any
	// SkipCalibration skips the loopback calibration before the run.
	SkipCalibration bool
	// Grace bounds the wait for in-flight requests after a stop.
	Grace time.Duration
	// Progress, when set (a terminal), shows the live progress line.
	Progress io.Writer
	// Log receives status lines (stderr).
	Log io.Writer
}

// Summary is summary.json: the report plus what only the load generator
// knows.
type Summary struct {
	Schema      int            `json:"schema"`
	Command     string         `json:"command"`
	Target      string         `json:"target"`
	Model       string         `json:"model"`
	Started     time.Time      `json:"started"`
	Calibration *Calibration   `json:"calibration,omitempty"`
	Client      ClientHealth   `json:"client"`
	Phases      []PhaseResult  `json:"phases"`
	Sweep       *SweepOutcome  `json:"sweep,omitempty"`
	Compat      *CompatViews   `json:"compat,omitempty"`
	Report      *report.Report `json:"report"`
	SLOsFailed  bool           `json:"slos_failed"`
	Records     int            `json:"records"`
	Embedded    string         `json:"embedded,omitempty"`
	Interrupted bool           `json:"interrupted,omitempty"`
}

// ClientHealth is the load generator's check on itself over the run.
type ClientHealth struct {
	// CPUUtil is the process's CPU time / (wall time × cores): near 1, the
	// client (and an embedded server, which shares the process) saturated
	// the machine.
	CPUUtil float64 `json:"cpu_util"`
	Cores   int     `json:"cores"`
	// GC pauses over the run.
	GCPauses     int64   `json:"gc_pauses"`
	GCPauseMaxMS float64 `json:"gc_pause_max_ms"`
	GCPauseP99MS float64 `json:"gc_pause_p99_ms"`
	// Worst schedule lag of any phase (actual − intended send of requests
	// only the schedule held).
	SendLagP99MS float64  `json:"send_lag_p99_ms"`
	SendLagMaxMS float64  `json:"send_lag_max_ms"`
	Warnings     []string `json:"warnings,omitempty"`
}

// Result is what Run returns.
type Result struct {
	Summary *Summary
	Report  *report.Report
	OutDir  string
}

// SLOsFailed reports whether any SLO failed (or had no data).
func (r *Result) SLOsFailed() bool { return r != nil && r.Summary != nil && r.Summary.SLOsFailed }

// Run executes a bench run and writes its results folder. It returns an
// error only when the run could not happen (bad configuration, no server,
// unwritable folder); failed requests are results, not errors. The text
// summary goes to out.
func Run(ctx context.Context, cfg Config, out io.Writer) (*Result, error) {
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}
	if cfg.Workload == nil {
		return nil, errors.New("bench: no workload")
	}
	if cfg.Sweep == nil {
		if err := cfg.Load.Validate(); err != nil {
			return nil, err
		}
	} else if err := cfg.Sweep.Validate(cfg.SLOs); err != nil {
		return nil, err
	}
	if err := checkOut(cfg.OutDir); err != nil {
		return nil, err
	}
	started := time.Now()
	sum := &Summary{Schema: 1, Command: strings.Join(cfg.Command, " "), Started: started.UTC()}

	target := cfg.Target
	if target.BaseURL == "" {
		if cfg.StartEmbedded == nil {
			return nil, errors.New("bench: no --url and no embedded engine")
		}
		emb, err := cfg.StartEmbedded(ctx)
		if err != nil {
			return nil, fmt.Errorf("embedded engine: %w", err)
		}
		defer func() { _ = emb.Close() }()
		target.BaseURL = emb.URL
		sum.Embedded = emb.Describe
		fmt.Fprintf(logw, "bench: no --url: started the embedded engine at %s\n%s\n", emb.URL, indent(emb.Describe))
	}
	if target.Model == "" {
		m, err := firstModel(ctx, target)
		if err != nil {
			return nil, err
		}
		target.Model = m
	}
	sum.Target, sum.Model = target.BaseURL, target.Model
	// The folder is made once the server answered, so a run that cannot
	// start leaves nothing behind.
	if err := prepareOut(cfg.OutDir); err != nil {
		return nil, err
	}
	if cfg.Embedded() {
		sum.Target = "embedded"
	}
	if err := writeFile(filepath.Join(cfg.OutDir, CommandFile), sum.Command+"\n"); err != nil {
		return nil, err
	}
	if err := writeJSON(filepath.Join(cfg.OutDir, ConfigFile), map[string]any{
		"target": redact(target), "config": cfg.Echo}); err != nil {
		return nil, err
	}

	if !cfg.SkipCalibration {
		c, err := Calibrate(ctx)
		if err != nil {
			fmt.Fprintf(logw, "bench: %v (continuing without a floor)\n", err)
		} else {
			sum.Calibration = c
			fmt.Fprintf(logw, "bench: client overhead floor on this host: %.3f ms (P99 %.3f ms, ITL jitter P99 %.3f ms)\n",
				c.FloorMS, c.TTFTErrP99MS, c.ITLErrP99MS)
		}
	}

	w, err := newRecordWriter(filepath.Join(cfg.OutDir, RequestsFile))
	if err != nil {
		return nil, err
	}
	clock := NewRealClock()
	client, err := NewClient(target, func() int64 { return int64(clock.Now()) }, 0)
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	defer client.Close()
	coll := report.NewCollector(report.Options{SLOs: cfg.SLOs})
	var compat compatAgg
	live := &Live{}
	runner := &Runner{
		Doer: client, Source: cfg.Workload, Clock: clock, RunID: runID(started), Grace: cfg.Grace, Live: live,
		Emit: func(r *latency.Record) {
			w.Write(r)
			coll.Add(r)
			compat.add(r)
			sum.Records++
		},
	}
	fmt.Fprintf(logw, "bench: %s, model %q, %s\n", client.URL(), target.Model, describeLoad(cfg))

	var stopLive func()
	if cfg.Progress != nil {
		lctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			live.Show(lctx, cfg.Progress, 500*time.Millisecond, func() string { return "bench:" })
		}()
		stopLive = func() { cancel(); <-done }
	}

	usage0 := cpuTime()
	gc0 := gcPauses()
	wall0 := time.Now()
	if cfg.Sweep == nil {
		res, err := runner.Run(ctx, "", cfg.Load)
		sum.Phases = append(sum.Phases, res)
		if err != nil {
			return nil, err
		}
	} else {
		oc, err := runSweep(ctx, runner, cfg, logw, &sum.Phases)
		sum.Sweep = oc
		if err != nil && !errors.Is(err, context.Canceled) {
			return nil, err
		}
	}
	if stopLive != nil {
		stopLive()
	}
	sum.Interrupted = ctx.Err() != nil
	sum.Client = health(cpuTime()-usage0, time.Since(wall0), gc0, gcPauses(), sum.Phases, sum.Calibration)
	if err := w.Close(); err != nil {
		return nil, err
	}

	info := report.RunInfo{Target: sum.Target, Model: target.Model, Mode: cfg.Load.Mode(),
		Duration: cfg.Load.Duration, OfferedRate: cfg.Load.Rate, Concurrency: cfg.Load.Concurrency,
		Warnings: sum.Client.Warnings}
	if sum.Calibration != nil {
		info.OverheadFloor = time.Duration(sum.Calibration.FloorMS * 1e6)
	}
	if sum.Sweep != nil {
		info.Points = sum.Sweep.points()
		info.Mode = sum.Sweep.mode()
	}
	coll.SetRun(info)
	if err := report.WriteRunInfo(cfg.OutDir, info); err != nil {
		return nil, err
	}
	rep := coll.Report()
	sum.Report = rep
	sum.Compat = compat.views()
	sum.SLOsFailed = slosFailed(rep, cfg.SLOs)
	if sum.Sweep != nil && len(cfg.SLOs) > 0 {
		// A sweep's records pool several loads: its verdict is whether any
		// point met the SLOs (for a capacity search, whether one was found).
		sum.SLOsFailed = true
		for _, p := range sum.Sweep.Points {
			if p.SLOsHold != nil && *p.SLOsHold {
				sum.SLOsFailed = false
			}
		}
	}
	if err := writeJSON(filepath.Join(cfg.OutDir, SummaryFile), sum); err != nil {
		return nil, err
	}
	if err := rep.WriteText(out); err != nil {
		return nil, err
	}
	writeBenchText(out, sum, cfg.OutDir)
	return &Result{Summary: sum, Report: rep, OutDir: cfg.OutDir}, nil
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
		if v.Status != "pass" {
			return true
		}
	}
	return false
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

func runID(t time.Time) string { return fmt.Sprintf("tt%x", t.UnixNano()&0xffffffffff) }

func writeFile(path, s string) error {
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return nil
}

// redact hides the API key in config.json.
func redact(t Target) Target {
	if t.APIKey != "" {
		t.APIKey = "(set)"
	}
	if t.Headers != nil {
		h := t.Headers.Clone()
		for k := range h {
			if strings.EqualFold(k, "Authorization") || strings.Contains(strings.ToLower(k), "key") {
				h[k] = []string{"(set)"}
			}
		}
		t.Headers = h
	}
	return t
}

// firstModel asks GET /v1/models for the first model id.
func firstModel(ctx context.Context, t Target) (string, error) {
	u, err := t.apiURL("/models")
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	if t.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+t.APIKey)
	}
	for k, vs := range t.Headers {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("cannot list models at %s (is the server up? or give --model): %w", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("listing models at %s: %s: %s (give --model to skip this)", u, resp.Status, truncate(strings.TrimSpace(string(b))))
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &list); err != nil || len(list.Data) == 0 || list.Data[0].ID == "" {
		return "", fmt.Errorf("%s lists no models (give --model)", u)
	}
	return list.Data[0].ID, nil
}

func describeLoad(cfg Config) string {
	if cfg.Sweep != nil {
		return cfg.Sweep.String()
	}
	l := cfg.Load
	var parts []string
	switch {
	case l.Arrivals != nil:
		parts = append(parts, "trace replay")
	case l.Rate > 0:
		parts = append(parts, fmt.Sprintf("%g req/s %s", l.Rate, l.Arrival))
	}
	if l.Concurrency > 0 {
		if l.Mode() == "open" {
			parts = append(parts, fmt.Sprintf("at most %d in flight", l.Concurrency))
		} else {
			parts = append(parts, fmt.Sprintf("%d concurrent", l.Concurrency))
		}
	}
	if l.Requests > 0 {
		parts = append(parts, fmt.Sprintf("%d requests", l.Requests))
	}
	if l.Duration > 0 {
		parts = append(parts, "for "+l.Duration.String())
	}
	return strings.Join(parts, ", ")
}

// cpuTime is the process's user + system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// gcPauses reads the runtime's GC pause histogram.
func gcPauses() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: "/sched/pauses/total/gc:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// health judges the client over the run and words its warnings.
func health(cpu, wall time.Duration, gc0, gc1 *metrics.Float64Histogram, phases []PhaseResult, cal *Calibration) ClientHealth {
	h := ClientHealth{Cores: runtime.NumCPU()}
	if wall > 0 {
		h.CPUUtil = cpu.Seconds() / (wall.Seconds() * float64(h.Cores))
	}
	if gc0 != nil && gc1 != nil && len(gc0.Counts) == len(gc1.Counts) {
		var n uint64
		diff := make([]uint64, len(gc1.Counts))
		for i := range gc1.Counts {
			diff[i] = gc1.Counts[i] - gc0.Counts[i]
			n += diff[i]
		}
		h.GCPauses = int64(n)
		var c uint64
		k := uint64(stats.Rank(99, int64(n))) // nearest rank of the P99 pause
		for i, d := range diff {
			if d == 0 {
				continue
			}
			c += d
			hi := gc1.Buckets[i+1]
			if hi > 1e9 {
				hi = gc1.Buckets[i]
			}
			h.GCPauseMaxMS = hi * 1e3
			if c >= k && h.GCPauseP99MS == 0 {
				h.GCPauseP99MS = hi * 1e3
			}
		}
	}
	for _, p := range phases {
		h.SendLagP99MS = max(h.SendLagP99MS, p.SendLagP99MS)
		h.SendLagMaxMS = max(h.SendLagMaxMS, p.SendLagMaxMS)
		if p.Mode == "open" && p.ScheduledRPS > 0 && p.AchievedRPS > 0 && p.AchievedRPS < 0.99*p.ScheduledRPS {
			h.Warnings = append(h.Warnings, fmt.Sprintf("phase %q: achieved %.1f req/s of %.1f scheduled (%.1f%%)",
				nameOr(p.Name), p.AchievedRPS, p.ScheduledRPS, 100*p.AchievedRPS/p.ScheduledRPS))
		}
	}
	if h.SendLagP99MS > 5 {
		h.Warnings = append(h.Warnings, fmt.Sprintf("schedule lag: P99 %.1f ms between the intended and the actual send of requests only the schedule held", h.SendLagP99MS))
	}
	if h.CPUUtil > 0.9 {
		h.Warnings = append(h.Warnings, fmt.Sprintf("CPU saturated: the process used %.0f%% of %d cores", 100*h.CPUUtil, h.Cores))
	}
	if h.GCPauseMaxMS > 5 {
		h.Warnings = append(h.Warnings, fmt.Sprintf("GC pauses up to %.1f ms during the run", h.GCPauseMaxMS))
	}
	if cal != nil && cal.TTFTErrP99MS > 5 {
		h.Warnings = append(h.Warnings, fmt.Sprintf("calibration: this client's TTFT error reached %.1f ms at P99 on this host", cal.TTFTErrP99MS))
	}
	return h
}

func nameOr(s string) string {
	if s == "" {
		return "run"
	}
	return s
}

// writeBenchText adds what only bench knows under the report's text.
func writeBenchText(w io.Writer, s *Summary, dir string) {
	fmt.Fprintln(w)
	for _, p := range s.Phases {
		if p.Mode == "open" && p.ScheduledRPS > 0 {
			fmt.Fprintf(w, "schedule %-14s scheduled %.2f req/s, achieved %.2f req/s (%.2f%%), send lag P50 %.3f ms P99 %.3f ms max %.3f ms\n",
				nameOr(p.Name), p.ScheduledRPS, p.AchievedRPS, 100*p.AchievedRPS/p.ScheduledRPS, p.SendLagP50MS, p.SendLagP99MS, p.SendLagMaxMS)
		}
	}
	if c := s.Calibration; c != nil {
		fmt.Fprintf(w, "client    overhead floor %.3f ms (TTFT error P50; P99 %.3f ms), ITL jitter P99 %.3f ms; CPU %.0f%% of %d cores; GC pauses %d (max %.2f ms)\n",
			c.FloorMS, c.TTFTErrP99MS, c.ITLErrP99MS, 100*s.Client.CPUUtil, s.Client.Cores, s.Client.GCPauses, s.Client.GCPauseMaxMS)
	} else {
		fmt.Fprintf(w, "client    no calibration; CPU %.0f%% of %d cores; GC pauses %d (max %.2f ms)\n",
			100*s.Client.CPUUtil, s.Client.Cores, s.Client.GCPauses, s.Client.GCPauseMaxMS)
	}
	for _, warn := range s.Client.Warnings {
		fmt.Fprintf(w, "WARNING   %s\n", warn)
	}
	if v := s.Compat; v != nil {
		fmt.Fprintf(w, "compat    vLLM TTFT/TPOT/ITL P50 %.2f/%.2f/%.2f ms · AIPerf ITL/ICL P50 %.2f/%.2f ms · guidellm TPOT P50 %.2f ms (docs/metrics.md)\n",
			v.VLLM.TTFT.P50, v.VLLM.TPOT.P50, v.VLLM.ITL.P50, v.AIPerf.ITL.P50, v.AIPerf.ICL.P50, v.Guidellm.TPOT.P50)
	}
	if s.Sweep != nil && s.Sweep.Line != "" {
		fmt.Fprintln(w, s.Sweep.Line)
	}
	if s.Interrupted {
		fmt.Fprintln(w, "interrupted: the summary covers the requests that finished")
	}
	fmt.Fprintf(w, "results   %s (%d records)\n", dir, s.Records)
}
