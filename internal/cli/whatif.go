package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/tokentrace/tokentrace/internal/capacity"
	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/simulate"
	"github.com/tokentrace/tokentrace/internal/whatif"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// whatIfFlags are report's what-if settings.
type whatIfFlags struct {
	mode     string // auto, off, all, or levers
	profile  string
	gpuFile  string
	capToks  int
	specK    int
	specA    float64
	parallel int
}

func bindWhatIfFlags(g *flagGroup, w *whatIfFlags) {
	g.stringVar(&w.mode, "what-if", "re-simulate the run with each remedy's lever changed: auto (when the run is simulated or embedded, or with --profile), off, all (every lever), or levers: "+strings.Join(whatif.LeverNames(), ", "))
	g.stringVar(&w.profile, "profile", "what-if on a measured run: the performance profile (tokentrace calibrate) of its server")
	bindGPUFileFlag(g, &w.gpuFile)
	g.intVar(&w.capToks, "max-tokens-cap", "what-if: a cap on max_tokens to try besides the run's P90 output length (0: only that)")
	g.intVar(&w.specK, "speculative-k", "what-if: draft tokens per step of the speculative decoding tried")
	g.float64Var(&w.specA, "speculative-alpha", "what-if: per-token acceptance rate of the speculative decoding tried")
	g.intVar(&w.parallel, "parallel", "what-if: simulations at once (0: one per CPU)")
}

// levers reads --what-if: nil for auto, the names otherwise; off is ok=false.
func (w whatIfFlags) levers() (names []string, on bool, err error) {
	switch m := strings.TrimSpace(w.mode); m {
	case "", "auto":
		return nil, true, nil
	case "off", "false", "none":
		return nil, false, nil
	default:
		for _, n := range strings.Split(m, ",") {
			names = append(names, strings.TrimSpace(n))
		}
		return names, true, nil
	}
}

// badWhatIfFlag marks an error as bad input to report's own what-if flags
// (--profile, --gpu-file, --what-if, …): the user's to fix, an exit.
type badWhatIfFlag struct{ error }

func (e badWhatIfFlag) Unwrap() error { return e.error }

// addWhatIf runs the what-if for a report of one results folder and
// attaches it. What-if is an optional section: what it cannot do — the
// run's folder cannot be rebuilt into a workload, the twin fails — is a
// note, and the report is still written. Bad input to report's own flags
// (a profile for another model, an unknown lever) is an error naming the
// flag, and so is an interrupted context.
func addWhatIf(ctx context.Context, rep *report.Report, cfg report.Config, slos []latency.SLO, w whatIfFlags) error {
	err := runWhatIf(ctx, rep, cfg, slos, w)
	var bad badWhatIfFlag
	if err == nil || rep == nil || ctx.Err() != nil || errors.As(err, &bad) {
		return err
	}
	rep.Notes = append(rep.Notes, "what-if: skipped: "+strings.TrimPrefix(err.Error(), "what-if: "))
	return nil
}

// runWhatIf is addWhatIf's work; every error it returns is addWhatIf's to
// judge.
func runWhatIf(ctx context.Context, rep *report.Report, cfg report.Config, slos []latency.SLO, w whatIfFlags) error {
	names, on, err := w.levers()
	if !on || err != nil || rep == nil {
		return err
	}
	opts := whatif.Options{SLOs: slos, Levers: names, MaxTokensCap: w.capToks, SpeculativeK: w.specK,
		SpeculativeAlpha: w.specA, Seed: 1, Parallel: w.parallel}
	if err := opts.Check(); err != nil {
		return badWhatIfFlag{err}
	}
	if len(cfg.Paths) != 1 || len(rep.Runs) > 1 || len(rep.Runs) == 1 && len(rep.Runs[0].Points) > 0 {
		if w.profile != "" || names != nil {
			rep.Notes = append(rep.Notes, "what-if: needs one run at one load (not several inputs or a sweep); skipped")
		}
		return nil
	}
	dir := cfg.Paths[0]
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		dir = filepath.Dir(dir)
	}
	b, skip, err := twinOf(dir, rep, w.profile, w.gpuFile)
	if err != nil {
		return err
	}
	if skip != "" {
		if !hasLever(rep) && names == nil {
			return nil
		}
		rep.Notes = append(rep.Notes, "what-if: "+skip+"; skipped")
		return nil
	}
	opts.Seed = b.seed
	wi, err := whatif.Run(ctx, b.Baseline, rep, opts)
	if err != nil {
		return err
	}
	if wi == nil && names != nil {
		rep.Notes = append(rep.Notes, "what-if: none of the levers asked for ("+w.mode+") changes this run's deployment (each is already set, or no finding calls for it)")
	}
	rep.WhatIf = wi
	return nil
}

// hasLever says whether a finding's remedy names an engine or deployment
// lever (those what-if predicts).
func hasLever(rep *report.Report) bool {
	for _, f := range rep.Findings {
		switch f.Rule {
		case "server-queueing", "prefill-bound", "decode-bandwidth", "prefill-interference", "kv-cache", "output-length", "stalls", "slo-breach":
			return true
		}
	}
	return false
}

// twin is the baseline the twin runs, with the seed of the run.
type twin struct {
	whatif.Baseline
	seed uint64
}

// twinOf rebuilds the run's deployment and workload from its folder: a
// simulated or embedded run from the flags config.json records; a measured
// one from --profile (the engine) and the workload bench's flags describe,
// or its records' arrivals and lengths. A GPU file given to report (for a
// profile calibrated on a custom hardware entry) replaces the run's. skip
// says why there is no twin.
func twinOf(dir string, rep *report.Report, profile, gpuFile string) (twin, string, error) {
	info, _, _ := results.ReadRunInfo(dir)
	config, err := results.ReadConfig(dir)
	if err != nil {
		return twin{}, "", err
	}
	sim := info.Simulated
	embedded := !sim && (info.Target == "embedded" || config != nil && config["url"] == "")
	if !sim && !embedded && profile == "" {
		return twin{}, "the run came from a real server: what-if needs its calibrated profile (--profile FILE, from tokentrace calibrate)", nil
	}
	if config == nil && (sim || embedded) && profile == "" {
		return twin{}, "the folder has no config.json to rebuild the run's engine from (give --profile)", nil
	}
	command, _ := results.ReadCommand(dir)
	p, err := parseRunFlags(config, sim, command)
	if err != nil {
		return twin{}, "", fmt.Errorf("what-if: %s: %w", results.ConfigPath(dir), err)
	}
	t := twin{seed: p.opts.Workload.Seed}
	t.Deployment = capacity.Deployment{Engine: p.opts.Engine, Replicas: p.opts.Replicas, Balancer: p.opts.Balancer}
	switch {
	case sim:
		t.Basis = "the run's engine"
		t.Notes = append(t.Notes, whatif.SimulateLeftOut(p.opts)...)
	case embedded:
		t.Basis = "the embedded engine's settings"
		t.Deployment.Engine = p.simEngine
	default:
		t.Basis = "profile " + filepath.Base(profile)
		eng, notes, err := whatif.EngineOfProfile(profile, info)
		if err != nil {
			return twin{}, "", badWhatIfFlag{err}
		}
		t.Deployment = capacity.Deployment{Engine: eng, Replicas: 1}
		t.Notes = append(t.Notes, notes...)
	}
	if gpuFile != "" {
		if _, err := perfmodel.GPUCatalogFor(gpuFile); err != nil {
			return twin{}, "", badWhatIfFlag{field.Wrap("gpu_file", err)}
		}
		t.Deployment.Engine.GPUFile = gpuFile
	}
	if profile != "" {
		t.Deployment.Engine.Profile = profile
		if sim || embedded {
			t.Basis = "profile " + filepath.Base(profile)
		}
		if _, _, err := t.Deployment.Engine.Config(); err != nil {
			var fe *field.Error
			if errors.As(err, &fe) && fe.Field == "gpu" && gpuFile == "" {
				err = field.Invalid("profile", profile, "is for GPU %s, not in the catalog: give its --gpu-file (%v)", t.Deployment.Engine.GPU, fe.Err)
			}
			return twin{}, "", badWhatIfFlag{field.Wrap("profile", unwrapField(err))}
		}
	}
	w, skip, notes, err := workloadOf(dir, p, sim || embedded || p.opts.IgnoreEOS)
	if err != nil || skip != "" {
		return twin{}, skip, err
	}
	t.Workload = w
	t.Notes = append(t.Notes, notes...)
	if rw, err := results.ReadObserved(dir); err == nil {
		for _, r := range rw.Requests {
			t.Inputs = append(t.Inputs, r.Input)
			t.Outputs = append(t.Outputs, r.Output)
		}
	}
	return t, "", nil
}

// unwrapField keeps a profile error's own words ("profile is for model X,
// not Y") rather than the nested field's.
func unwrapField(err error) error {
	var fe *field.Error
	if errors.As(err, &fe) && fe.Field == "profile" && fe.Err != nil {
		return fe.Err
	}
	return err
}

// runFlags are a run's flags parsed back: simulate's options (its engine,
// workload and deployment), and for bench's embedded engine its --sim-*.
type runFlags struct {
	opts      simulate.Options
	simEngine engine.Options
	given     func(string) bool
	has       bool
}

// parseRunFlags sets the flags a run recorded (those that differ from
// their defaults) on fresh flag groups: simulate's, or bench's workload
// and its embedded engine's (--sim-*).
func parseRunFlags(cfg map[string]string, sim bool, command string) (runFlags, error) {
	p := runFlags{opts: simulate.DefaultOptions(), simEngine: engine.DefaultOptions(), has: cfg != nil}
	if !sim {
		p.opts.IgnoreEOS = false // bench's default
	}
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	g := newFlagGroup(fs, "", "", "seed")
	fs.Uint64Var(&p.opts.Workload.Seed, "seed", p.opts.Workload.Seed, "")
	bindEngineFlags(g, &p.opts.Engine)
	bindRequestFlags(g, &p.opts.Endpoint, &p.opts.IgnoreEOS)
	bindWorkloadFlags(g, &p.opts.Workload)
	bindDeploymentFlags(g, &p.opts)
	var sg *flagGroup
	if !sim {
		sg = newFlagGroup(fs, "sim-", "")
		bindEngineFlags(sg, &p.simEngine)
	}
	for k, v := range cfg {
		fl := fs.Lookup(k)
		if fl == nil || fl.Annotations[aliasOf] != nil || v == fl.DefValue {
			continue
		}
		if err := fs.Set(k, v); err != nil {
			return p, fmt.Errorf("flag --%s=%q: %w", k, v, err)
		}
	}
	if !sim && cfg["url"] == "" && !strings.Contains(command, "--ignore-eos") {
		p.opts.IgnoreEOS = true // bench asks the embedded engine for it unless told
	}
	for _, gr := range []*flagGroup{g, sg} {
		if gr != nil {
			if err := gr.finish(); err != nil {
				return p, err
			}
		}
	}
	p.given = g.given
	if sim {
		p.opts.Engine.Seed = p.opts.Workload.Seed
	}
	return p, nil
}

// workloadOf is the run's workload: bench's or simulate's flags rebuilt
// (the same prompts, shared prefixes, sessions and arrivals, by the run's
// seed), else the records' arrivals and lengths.
//
// A measured run's flags are used only when its answers ran to max_tokens
// (--ignore-eos): otherwise their lengths are the server's, which the
// records hold.
func workloadOf(dir string, p runFlags, lengthsKnown bool) (capacity.Workload, string, []string, error) {
	o := p.opts.Workload
	chat := p.opts.Endpoint != "completions"
	if p.has && lengthsKnown && o.Trace == "" && o.Prompts == "" {
		if o.Concurrency > 0 && o.Rate == 0 {
			return capacity.Workload{}, "the run is a closed loop (its arrivals follow its server): what-if needs an open-loop run", nil, nil
		}
		if o.Duration > 0 && !p.given("requests") {
			rate := o.Rate
			if rate == 0 {
				rate = workload.DefaultRate
			}
			// The twin sends a count, not a span: the duration given is
			// spent on the number of requests it stood for.
			o.Requests, o.Duration = max(1, int(math.Round(rate*o.Duration.Seconds()))), 0
		}
		o.Concurrency = 0
		src, load, err := o.Build(chat, func(f string) bool { return f == "requests" || f != "duration" && p.given(f) })
		if err != nil {
			return capacity.Workload{}, "", nil, fmt.Errorf("what-if: the run's workload: %w", err)
		}
		w, err := capacity.NewWorkload(src, load, p.opts.IgnoreEOS, describeWorkload(o, load))
		if err != nil {
			return capacity.Workload{}, "", nil, fmt.Errorf("what-if: the run's workload: %w", err)
		}
		return w, "", nil, nil
	}
	w, err := capacity.FromResults(dir, chat, max(o.Seed, 1))
	switch {
	case errors.Is(err, capacity.ErrNoArrivals):
		return w, "what-if needs an open-loop run with arrival times (" + err.Error() + ")", nil, nil
	case err != nil:
		return w, "", nil, fmt.Errorf("what-if: %w", err)
	}
	return w, "", []string{"the workload is the records' arrivals and lengths: which prompts shared a prefix, and which requests were turns of one session, is not in them (no shared prefix is simulated)"}, nil
}
