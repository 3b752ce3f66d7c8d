package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/simulate"
	"github.com/tokentrace/tokentrace/internal/whatif"
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
	kvLink   string
}

func bindWhatIfFlags(g *flagGroup, w *whatIfFlags) {
	g.stringVar(&w.mode, "what-if", "re-simulate the run with each remedy's lever changed: auto (when the run is simulated or embedded, or with --profile), off, all (every lever), or levers: "+strings.Join(whatif.LeverNames(), ", "))
	g.stringVar(&w.profile, "profile", "what-if on a measured run: the performance profile (tokentrace calibrate) of its server")
	bindGPUFileFlag(g, &w.gpuFile)
	g.intVar(&w.capToks, "max-tokens-cap", "what-if: a cap on max_tokens to try besides the run's P90 output length (0: only that)")
	g.intVar(&w.specK, "speculative-k", "what-if: draft tokens per step of the speculative decoding tried")
	g.float64Var(&w.specA, "speculative-alpha", "what-if: per-token acceptance rate of the speculative decoding tried")
	g.intVar(&w.parallel, "parallel", "what-if: simulations at once (0: one per CPU)")
	g.stringVar(&w.kvLink, "kv-link", "what-if: the link the disaggregate remedy pulls the KV cache over: "+strings.Join(perfmodel.LinkNames(), ", ")+" (default "+perfmodel.DefaultLink+")")
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
		SpeculativeAlpha: w.specA, Seed: 1, Parallel: w.parallel, KVLink: w.kvLink}
	if err := opts.Check(); err != nil {
		return badWhatIfFlag{err}
	}
	if !whatif.OneRun(len(cfg.Paths), rep) {
		if w.profile != "" || names != nil {
			rep.Notes = append(rep.Notes, whatif.OneRunNote)
		}
		return nil
	}
	dir := cfg.Paths[0]
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		dir = filepath.Dir(dir)
	}
	run, err := recordedRun(dir)
	if err != nil {
		return err
	}
	b, skip, err := whatif.TwinOf(dir, run, w.profile, w.gpuFile)
	var bad *whatif.InputError
	if errors.As(err, &bad) {
		return badWhatIfFlag{err}
	}
	if err != nil {
		return err
	}
	if skip != "" {
		if !whatif.Called(rep) && names == nil {
			return nil
		}
		rep.Notes = append(rep.Notes, "what-if: "+skip+"; skipped")
		return nil
	}
	opts.Seed = b.Seed
	wi, err := whatif.Run(ctx, b.Baseline, rep, opts)
	if err != nil {
		return err
	}
	if wi == nil && names != nil {
		rep.Notes = append(rep.Notes, "what-if: none of the levers asked for ("+w.mode+") changes this run's deployment (each is already set, or no finding calls for it)")
	}
	if wi != nil {
		wi.Run = dir
	}
	rep.WhatIf = wi
	return nil
}

// recordedRun is the run's configuration, typed, from dir/config.json:
// its typed run (version 2, whatif.ReadRecorded), else its flags by name (version 1, an older
// folder) adapted by runConfigOfFlags; no Run when the folder has none. A
// configuration that does not parse is the Recorded's Err (TwinOf's to
// report); the error returned is the file's, unread.
func recordedRun(dir string) (whatif.Recorded, error) {
	if rec, ok := whatif.ReadRecorded(dir); ok {
		return rec, nil
	}
	flags, err := results.ReadConfig(dir)
	if err != nil || flags == nil {
		return whatif.Recorded{}, err
	}
	info, _, _ := results.ReadRunInfo(dir)
	command, _ := results.ReadCommand(dir)
	rc, err := runConfigOfFlags(flags, info.Simulated, command)
	return whatif.Recorded{Run: &rc, Err: err}, nil
}

// runConfigOfFlags is the one adapter from a run's flags by name
// (config.json's "config") to its typed configuration, for a folder of
// version 1, which holds only the flags (bench and simulate now write
// the typed run from their options: benchRun, simulate's): it sets the
// flags that differ from their defaults on fresh flag groups, simulate's
// or bench's workload and its embedded engine's (--sim-*).
func runConfigOfFlags(cfg map[string]string, sim bool, command string) (simulate.RunConfig, error) {
	rc := simulate.RunConfig{Options: simulate.DefaultOptions()}
	simEngine := engine.DefaultOptions()
	if !sim {
		rc.Options.IgnoreEOS = false // bench's default
	}
	o := &rc.Options
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	g := newFlagGroup(fs, "", "", "seed")
	fs.Uint64Var(&o.Workload.Seed, "seed", o.Workload.Seed, "")
	bindEngineFlags(g, &o.Engine)
	bindRequestFlags(g, &o.Endpoint, &o.IgnoreEOS)
	bindWorkloadFlags(g, &o.Workload)
	bindDeploymentFlags(g, o)
	var sg *flagGroup
	if !sim {
		sg = newFlagGroup(fs, "sim-", "")
		bindEngineFlags(sg, &simEngine)
		if cfg["url"] == "" {
			rc.SimEngine = &simEngine // the engine bench embedded
		}
	}
	for k, v := range cfg {
		fl := fs.Lookup(k)
		if fl == nil || fl.Annotations[aliasOf] != nil || v == fl.DefValue {
			continue
		}
		if err := fs.Set(k, v); err != nil {
			return rc, fmt.Errorf("flag --%s=%q: %w", k, v, err)
		}
	}
	if !sim && cfg["url"] == "" && !strings.Contains(command, "--ignore-eos") {
		o.IgnoreEOS = true // bench asks the embedded engine for it unless told
	}
	for _, gr := range []*flagGroup{g, sg} {
		if gr != nil {
			if err := gr.finish(); err != nil {
				return rc, err
			}
		}
	}
	for f := range g.fields {
		if g.given(f) {
			rc.Given = append(rc.Given, f)
		}
	}
	slices.Sort(rc.Given)
	if sim {
		o.Engine.Seed = o.Workload.Seed
	}
	return rc, nil
}
