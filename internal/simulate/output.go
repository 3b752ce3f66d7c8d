package simulate

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/results"
)

// Output says where a simulation's results folder goes and what it says
// about its run.
type Output struct {
	// Dir is the results folder (created; it must not hold a run).
	Dir string
	// Command is the command line (command.txt); Echo the configuration as
	// given and Run the run's configuration typed (config.json).
	Command []string
	Echo    any
	Run     *RunConfig
	// SLOs are judged in the report and the summary.
	SLOs []latency.SLO
	// Describe is the engine's banner (engine.Config.Describe).
	Describe string
	// Envelope is what the engine's constants were fitted on; the run's
	// case outside it is flagged in its warnings (nil: not checked).
	Envelope *engine.Envelope
	// EngineFamily is the serving engine simulated (--engine: vllm,
	// sglang, trtllm, llamacpp, ollama[@version]); run.json keeps it so that the
	// report speaks that engine's settings. Empty: vLLM's.
	EngineFamily string
}

// Summary is a simulation's summary.json: the report plus what only the
// simulator knows.
type Summary struct {
	Schema    int    `json:"schema"`
	Command   string `json:"command"`
	Simulated bool   `json:"simulated"`
	Target    string `json:"target"`
	Model     string `json:"model"`
	Engine    string `json:"engine"`
	Balancer  string `json:"balancer"`
	// NetworkNS is the one-way client–router latency assumed.
	NetworkNS int64            `json:"network_ns"`
	Replicas  []ReplicaSummary `json:"replicas"`
	Sent      int              `json:"sent"`
	Succeeded int              `json:"succeeded"`
	Rejected  int              `json:"rejected"`
	EndNS     int64            `json:"end_ns"`
	WallMS    float64          `json:"wall_ms"`
	Warnings  []string         `json:"warnings,omitempty"`
	// OutsideEnvelope lists where the run left what the constants were
	// fitted on (engine.Envelope.Check); Interval80 is the run's 80 %
	// interval (engine.Envelope.Interval80: cross-source when outside).
	OutsideEnvelope []string         `json:"outside_envelope,omitempty"`
	Interval80      *engine.Interval `json:"interval80,omitempty"`
	Report          *report.Report   `json:"report"`
	SLOsFailed      bool             `json:"slos_failed"`
	Records         int              `json:"records"`
}

// ReplicaSummary is one replica in summary.json.
type ReplicaSummary struct {
	Name          string  `json:"name"`
	Pool          int     `json:"pool"`
	Requests      int     `json:"requests"`
	Steps         int64   `json:"steps"`
	Preemptions   int64   `json:"preemptions"`
	PrefixQueries int64   `json:"prefix_queries"`
	PrefixHits    int64   `json:"prefix_hits"`
	PromptTokens  int64   `json:"prompt_tokens"`
	OutputTokens  int64   `json:"generation_tokens"`
	PrefixHitRate float64 `json:"prefix_hit_rate"`
}

// WriteRun simulates cfg into a results folder that `tokentrace report`
// reads as it reads bench's: requests.jsonl, run.json (marked simulated),
// summary.json, command.txt, config.json and, with cfg.Steps, steps.jsonl
// (one line per engine step: the replica and its engine.StepRecord). The
// report's text goes to w. A configuration that cannot run is an error
// before anything is written.
func WriteRun(cfg Config, o Output, w io.Writer) (*Summary, error) {
	if err := results.Check(o.Dir); err != nil {
		return nil, err
	}
	cfg.RecycleRecords = true // each record is written and reduced before the next
	s, err := newSim(cfg)
	if err != nil {
		return nil, err
	}
	cfg = s.cfg
	if err := results.Prepare(o.Dir); err != nil {
		return nil, err
	}
	sum := &Summary{Schema: 1, Command: strings.Join(o.Command, " "), Simulated: true, Model: cfg.Model,
		Engine: o.Describe, Balancer: cfg.Balancer, NetworkNS: int64(cfg.Network)}
	sum.Target = describeTarget(cfg)
	if err := results.WriteCommand(o.Dir, sum.Command); err != nil {
		return nil, err
	}
	if err := results.WriteConfig(o.Dir, results.Config{Config: o.Echo, Run: o.runConfig()}); err != nil {
		return nil, err
	}
	rw, err := results.CreateRecords(o.Dir)
	if err != nil {
		return nil, err
	}
	coll := report.NewCollector(report.Options{SLOs: o.SLOs})
	wall0 := time.Now()
	var lens lengthSpan
	res := s.run(func(r *latency.Record) {
		lens.add(r)
		rw.Write(r)
		coll.Add(r)
		sum.Records++
	})
	sum.WallMS = float64(time.Since(wall0).Microseconds()) / 1e3
	if err := rw.Close(); err != nil {
		return nil, err
	}
	sum.Sent, sum.Succeeded, sum.Rejected, sum.EndNS = res.Sent, res.Succeeded, res.Rejected, int64(res.End)
	if o.Envelope != nil {
		sum.checkEnvelope(o.Envelope, res, lens, cfg.Replicas)
	}
	sum.Warnings = res.Warnings
	for _, r := range res.Replicas {
		sum.Replicas = append(sum.Replicas, summarizeReplica(r))
	}
	info := runInfo(cfg, sum.Target, res)
	info.EngineFamily = o.EngineFamily
	coll.SetRun(info)
	if err := results.WriteRunInfo(o.Dir, info); err != nil {
		return nil, err
	}
	if cfg.Steps {
		if err := writeSteps(o.Dir, res.Replicas); err != nil {
			return nil, err
		}
	}
	rep := coll.Report()
	sum.Report = rep
	sum.SLOsFailed = len(o.SLOs) > 0 && (len(rep.SLOs) == 0 || rep.SLOsFailed())
	if err := results.WriteSummary(o.Dir, sum); err != nil {
		return nil, err
	}
	if err := rep.WriteText(w); err != nil {
		return nil, err
	}
	writeText(w, sum, o.Dir)
	return sum, nil
}

// checkEnvelope flags where the run left the constants' envelope, each
// flag also a warning of res, and keeps the run's 80 % interval: the
// constants' own inside it, the cross-source one outside
// (engine.Envelope.Interval80).
func (sum *Summary) checkEnvelope(env *engine.Envelope, res *Result, lens lengthSpan, replicas int) {
	c := envelopeCase(*res, lens, replicas)
	sum.OutsideEnvelope = env.Flags(c)
	for _, f := range sum.OutsideEnvelope {
		res.Warnings = append(res.Warnings, results.EnvelopeWarning+f)
	}
	iv := env.Interval80(c)
	sum.Interval80 = &iv
}

// runInfo is run.json of a simulated run: its load, warnings and the
// engine's sampled gauges.
func runInfo(cfg Config, target string, res *Result) results.RunInfo {
	info := results.RunInfo{Target: target, Model: cfg.Model, Mode: cfg.Load.Mode(), Simulated: true,
		Duration: cfg.Load.Duration, OfferedRate: cfg.Load.Rate, Concurrency: cfg.Load.Concurrency, RampUp: cfg.Load.RampName(),
		Warnings: res.Warnings}
	for _, sm := range res.Samples {
		info.Samples = append(info.Samples, results.ServerSample{AtNS: int64(sm.At), Running: float64(sm.Running),
			Waiting: float64(sm.Waiting), KVCacheUsage: sm.KVUsage})
	}
	return info
}

func summarizeReplica(r ReplicaResult) ReplicaSummary {
	st := r.Stats
	rs := ReplicaSummary{Name: r.Name, Pool: r.Pool, Requests: r.Requests, Steps: st.Steps, Preemptions: st.Preemptions,
		PrefixQueries: st.PrefixQueries, PrefixHits: st.PrefixHits, PromptTokens: st.PromptTokens, OutputTokens: st.GenerationTokens}
	if st.PrefixQueries > 0 {
		rs.PrefixHitRate = float64(st.PrefixHits) / float64(st.PrefixQueries)
	}
	return rs
}

// describeTarget names the simulated deployment, e.g. "simulated: 4
// replicas, prefix_affinity".
func describeTarget(cfg Config) string {
	s := fmt.Sprintf("simulated: %d replica", cfg.Replicas)
	if cfg.Replicas != 1 {
		s += "s"
	}
	if cfg.Replicas > 1 || len(cfg.Pools) > 0 {
		s += ", " + cfg.Balancer
	}
	if len(cfg.Pools) > 0 {
		var p []string
		for _, pl := range cfg.Pools {
			bound := "*"
			if pl.MaxInputTokens > 0 {
				bound = fmt.Sprint(pl.MaxInputTokens)
			}
			p = append(p, fmt.Sprintf("%s:%d", bound, pl.Replicas))
		}
		s += ", length pools " + strings.Join(p, ",")
	}
	if cfg.Admission != nil {
		s += ", admission"
	}
	return s
}

// stepLine is one line of steps.jsonl.
type stepLine struct {
	Replica int `json:"replica"`
	engine.StepRecord
}

func writeSteps(dir string, reps []ReplicaResult) error {
	f, err := results.CreateSteps(dir)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<16)
	enc := json.NewEncoder(bw)
	for i, r := range reps {
		for _, st := range r.Steps {
			if err := enc.Encode(stepLine{Replica: i, StepRecord: st}); err != nil {
				_ = f.Close() // the write's error is the one to report
				return fmt.Errorf("steps file: %w", err)
			}
		}
	}
	if err := bw.Flush(); err != nil {
		_ = f.Close() // the write's error is the one to report
		return fmt.Errorf("steps file: %w", err)
	}
	return f.Close()
}

// writeText adds what only the simulator knows under the report's text.
func writeText(w io.Writer, s *Summary, dir string) {
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%s; %d sent, %d succeeded, %d refused; %v of virtual time in %.0f ms\n",
		s.Target, s.Sent, s.Succeeded, s.Rejected, time.Duration(s.EndNS).Round(time.Millisecond), s.WallMS)
	for _, r := range s.Replicas {
		fmt.Fprintf(w, "replica   %-11s pool %d: %6d requests, %7d steps, %5d preemptions, prefix cache hits %.1f%%\n",
			r.Name, r.Pool, r.Requests, r.Steps, r.Preemptions, 100*r.PrefixHitRate)
	}
	for _, warn := range s.Warnings {
		fmt.Fprintf(w, "WARNING   %s\n", warn)
	}
	if iv := s.Interval80; iv != nil {
		fmt.Fprintf(w, "interval  80 %%: %s\n", iv)
	}
	fmt.Fprintf(w, "results   %s (%d records)\n", dir, s.Records)
}
