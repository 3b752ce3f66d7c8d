package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tokentrace/tokentrace/internal/calibrate"
	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/verify"
)

// calibrateLong is calibrate's help.
const calibrateLong = `calibrate reads bench results folders from one server (their per-request
records; the server's own split when it gave one, and with bench --server-metrics tokentrace its
own scheduling instants, which make the replay exact),
replays the same arrivals and lengths through the simulated engine, and fits the performance model's
constants (compute efficiency, memory-bandwidth efficiency, step overhead) by
minimising the error between simulated and measured TTFT, TPOT and E2E
(Nelder–Mead; bootstrap intervals over requests). It writes a profile that
serve, simulate, estimate and bench --sim-* load with --profile, and prints
each constant with its interval, the residuals and the range fitted on.
--ledger FILE (verify's ledger) fits the ledger's runs too — a run after
a remedy is more data from the same server — and re-runs its verifies with
the new profile, saying how much their error fell.

The engine flags say what the server ran (its --engine family, model, GPU,
tensor parallel size, precisions, batch limits), with the names serve takes;
--engine sets that engine's scheduler defaults, is recorded in the profile
and gives the family's shipped constants as the start where it has them for
the GPU; --profile gives the starting constants instead.

Exit status: 0 when the profile was written, 2 for bad input (a folder
without records, lengths or timestamps; unknown model or GPU), 1 otherwise
(docs/cli.md). See docs/calibrate.md.`

func newCalibrateCmd() *cobra.Command {
	cfg := calibrate.Config{Engine: engine.DefaultOptions(), Bootstrap: 16, Seed: 1}
	out := "profile.yaml"
	var ledger string
	var g *flagGroup
	cmd := &cobra.Command{
		Use:   "calibrate RESULTS...",
		Short: "Fit the performance model's constants to a real server's bench results and write a profile",
		Long:  calibrateLong,
		Example: `  tokentrace bench --url http://gpu-box:8000 --server-metrics tokentrace --rate 4 --requests 200 --output-dir results/low
  tokentrace bench --url http://gpu-box:8000 --server-metrics tokentrace --rate 16 --requests 300 --output-dir results/high
  tokentrace calibrate results/low results/high --model Llama-3.1-8B --gpu H100-SXM -o h100.yaml
  tokentrace serve --profile h100.yaml`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 && ledger == "" {
				return fmt.Errorf("calibrate takes at least one results folder (or --ledger FILE)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.finish(); err != nil {
				return usageError(fmt.Errorf("calibrate: %w", err), g)
			}
			if err := cfg.Validate(); err != nil {
				return usageError(fmt.Errorf("calibrate: %w", err), g)
			}
			if _, _, err := cfg.Engine.Config(); err != nil {
				return usageError(fmt.Errorf("calibrate: %w", err), g)
			}
			entries, ws, err := calibrateInputs(cmd, g, args, ledger, cfg.Engine)
			if err != nil {
				return err
			}
			if err := checkServedModel(cmd.ErrOrStderr(), ws, cfg.Engine, g); err != nil {
				return err
			}
			res, err := calibrate.Calibrate(cmd.Context(), results.Merge(ws...), cfg)
			if err != nil {
				if errors.Is(err, results.ErrBadInput) {
					return usageError(fmt.Errorf("calibrate: %w", err), g)
				}
				return fmt.Errorf("calibrate: %w", err)
			}
			if err := res.Profile.WriteFile(out); err != nil {
				return fmt.Errorf("calibrate: %w", err)
			}
			if err := res.WriteText(cmd.OutOrStdout()); err != nil {
				return err
			}
			if _, err = fmt.Fprintf(cmd.OutOrStdout(), "profile written to %s (load it with --profile %s)\n", out, out); err != nil || ledger == "" {
				return err
			}
			return reverify(cmd.Context(), cmd.OutOrStdout(), entries, out)
		},
	}
	f := cmd.Flags()
	g = newFlagGroup(f, "", "", "natural-output-tokens", "seed", "enable-prefix-caching")
	bindEngineFlags(g, &cfg.Engine)
	f.StringVar(&cfg.EngineVersion, "engine-version", "", "the server's engine version, recorded in the profile")
	g.intVar(&cfg.Bootstrap, "bootstrap", "bootstrap resamples for the confidence intervals (0: 16)")
	f.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the bootstrap resamples")
	f.StringVar(&ledger, "ledger", "", "a verify ledger (verify --ledger FILE): its runs (each verify's BEFORE and AFTER, where the server ran the scheduler fitted) are fitted too, and its verifies re-run with the new profile, saying how much the error fell")
	bindOutputFile(newFlagGroup(f, "", ""), &out, "profile file to write")
	return cmd
}

// calibrateInputs reads what calibrate fits: the results folders named,
// and with a ledger (--ledger) its entries and the runs they hold, each
// folder's observed requests.
func calibrateInputs(cmd *cobra.Command, g *flagGroup, args []string, ledger string, eng engine.Options) ([]verify.Entry, []*results.Observations, error) {
	var entries []verify.Entry
	if ledger != "" {
		var notes []string
		var err error
		if entries, err = readLedger(ledger); err != nil {
			return nil, nil, usageError(fmt.Errorf("calibrate: %w", err), g)
		}
		if args, notes, err = ledgerRuns(args, entries, eng); err != nil {
			return nil, nil, usageError(fmt.Errorf("calibrate: %w", err), g)
		}
		for _, n := range notes {
			fmt.Fprintf(cmd.ErrOrStderr(), "calibrate: ledger: %s\n", n)
		}
		if len(args) == 0 {
			return nil, nil, usageError(fmt.Errorf("calibrate: the ledger %s holds no run the fit can take", ledger), g)
		}
	}
	var ws []*results.Observations
	for _, dir := range args {
		w, err := results.ReadObserved(dir)
		if err != nil {
			return nil, nil, usageError(fmt.Errorf("calibrate: %w", err))
		}
		ws = append(ws, w)
	}
	return entries, ws, nil
}

// checkServedModel compares the model the runs served (run.json's model,
// the name bench sent) with the one calibrate is to fit: one that does not
// look like it is refused when --model was not given (the default would be
// fitted), and warned of when it was; a --gpu not given is warned of.
func checkServedModel(stderr io.Writer, ws []*results.Observations, o engine.Options, g *flagGroup) error {
	spec, err := perfmodel.ResolveModel(o.Model)
	if err != nil {
		return nil // Config reported it
	}
	for _, w := range ws {
		served := w.Run.Model
		if served == "" || sameModel(served, spec.Name) {
			continue
		}
		if !g.given("model") {
			return &ExitError{Code: ExitUsage, Err: fmt.Errorf("calibrate: %s served model %q, but no --model was given, so the fit would be of %s (the default): "+
				"give --model (a catalog name, tokentrace estimate --list, or the model's config.json) and --gpu as the server ran them", w.Dir, served, spec.Name)}
		}
		fmt.Fprintf(stderr, "calibrate: warning: %s served model %q, fitted as --model %s: make sure they are the same model\n", w.Dir, served, spec.Name)
	}
	if !g.given("gpu") && !g.given("profile") {
		fmt.Fprintf(stderr, "calibrate: warning: no --gpu given: fitted as on %s (the default); give --gpu as the server ran\n", o.GPU)
	}
	return nil
}

// sameModel says whether a served model name (a Hugging Face id, a file
// name) names the catalog model: one contains the other, case and
// separators aside ("meta-llama/Llama-3.1-8B-Instruct" is Llama-3.1-8B).
func sameModel(served, name string) bool {
	a, b := field.FoldName(served), field.FoldName(name)
	return a != "" && b != "" && (strings.Contains(a, b) || strings.Contains(b, a))
}
