package cli

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/results"
)

// reportLong is report's help.
const reportLong = `report reads bench results (folders holding requests.jsonl, or the files
themselves) and says where the time went: percentiles with bootstrap confidence
intervals, each request's end-to-end latency split into stages (client queue,
connect, send, network, server queue, prefill, decode, stream tail), SLO
verdicts with goodput and attainment, and a diagnosis naming the cause of each
breach with the numbers that show it and what to do.

Formats: text (default), md, json (schema in docs/report.md), csv (one line per
request), series-csv (one line per time window: latency percentiles, rates, in
flight, failures and the server's gauges) and html (one self-contained file;
--output/-o, default report.html in the results folder). --compare A B sets two runs side by side and marks
each difference larger than its confidence interval.

What-if: for a simulated or embedded-engine run, or a measured one with
--profile (from tokentrace calibrate), each remedy the diagnosis names is
re-simulated on the run's own workload with that lever changed, and its
predicted effect on the breached SLO and on goodput is shown, ranked
(--what-if auto|off|all|LEVER,…; docs/report.md, "What-if remedies").

SLOs: without --slo, those the run was benched with (its config.json's slo)
are judged; --slo overrides them (--slo "" judges none).

Exit status: 0 when the report is written (and every SLO holds), 3 when an
SLO failed (given or the run's own), 2 for bad flags or results that cannot be read, 1 when the
output cannot be written (docs/cli.md).`

func newReportCmd() *cobra.Command {
	cfg := report.Config{Format: "text", Options: report.Options{Seed: 1, Resamples: 2000}}
	var slo, output string
	var g *flagGroup
	wi := whatIfFlags{mode: "auto", specK: 4, specA: 0.7}
	cmd := &cobra.Command{
		Use:   "report RESULTS... | report --compare A B",
		Short: "Report percentiles, stage split, SLO verdicts and a diagnosis from bench results",
		Long:  reportLong,
		Example: `  tokentrace report results/run1
  tokentrace report results/run1 --slo "ttft:p99<=1.5s,tpot:p99<=50ms" --format html
  tokentrace report --compare results/before results/after --format md
  tokentrace report results/run1 --slo "ttft:p99<=1s" --profile h100.yaml --what-if prefix-caching,replicas`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("slo") && !cfg.Compare {
				var err error
				if slo, err = runSLO(args); err != nil {
					return usageError(fmt.Errorf("report: %w", err), g)
				}
				if slo != "" {
					fmt.Fprintf(cmd.ErrOrStderr(), "report: judging the run's own --slo %q (its config.json; --slo overrides)\n", slo)
				}
			}
			slos, err := latency.ParseSLOs(slo)
			if err != nil {
				return usageError(fmt.Errorf("report: %w", field.Wrap("slo", err)), g)
			}
			cfg.SLOs = slos
			cfg.Paths = args
			r, err := report.LoadConfig(cmd.Context(), cfg)
			if err != nil {
				return usageError(fmt.Errorf("report: %w", err), g)
			}
			if !cmd.Flags().Changed("slo") && slo != "" && r.Report != nil {
				r.Report.Notes = append(r.Report.Notes, fmt.Sprintf("SLOs judged: the run's own --slo %q (config.json); report --slo overrides them", slo))
			}
			if !cfg.Compare && cfg.Format != "csv" {
				if err := addWhatIf(cmd.Context(), r.Report, cfg, slos, wi); err != nil {
					return usageError(fmt.Errorf("report: %w", err), g)
				}
			}
			if err := writeReport(r, output, cfg.DefaultFile(), cmd.OutOrStdout()); err != nil {
				return fmt.Errorf("report: %w", err)
			}
			if r.Report != nil && len(slos) > 0 && r.Report.SLOsFailed() {
				return &ExitError{Code: ExitSLOFailed, Err: fmt.Errorf("report: an SLO failed (%s)", slo)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	g = newFlagGroup(f, "", "")
	bindSLOFlag(g, &slo, `objectives, e.g. "ttft:p99<=1.5s,tpot:p99<=50ms,e2e:p95<=10s"`)
	g.bind("format", "output format: "+strings.Join(report.Formats, ", "), func(fs *pflag.FlagSet, n, u string) {
		fs.StringVarP(&cfg.Format, n, "f", cfg.Format, u)
	})
	bindOutputFile(g, &output, "write to this file, - for standard output (html defaults to report.html in the results folder)")
	g.boolVar(&cfg.Compare, "compare", "compare two runs: report --compare A B")
	g.uint64Var(&cfg.Seed, "seed", "seed of the bootstrap's random source")
	g.intVar(&cfg.Resamples, "resamples", "bootstrap resamples for confidence intervals")
	g.boolVar(&cfg.IncludeWarmup, "include-warmup", "keep warm-up requests in the results")
	g.intVar(&cfg.GPUs, "gpus", "GPUs that served the run: a sweep's Pareto front gives output tokens/s per GPU (default: per replica)")
	bindWhatIfFlags(g, &wi)
	return cmd
}

// runSLO is the --slo the runs in paths were benched or simulated with, read
// from their config.json: "" when none recorded one, or when they disagree
// (pooled runs with different objectives have no one SLO to judge).
func runSLO(paths []string) (string, error) {
	var slo string
	for i, p := range paths {
		if st, err := os.Stat(p); err != nil || !st.IsDir() {
			return "", nil // a records file, or a path LoadConfig will name
		}
		c, err := results.ReadConfig(p)
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", results.ConfigPath(p), err)
		}
		s := strings.TrimSpace(c["slo"])
		if s == "" || (i > 0 && s != slo) {
			return "", nil
		}
		if _, err := latency.ParseSLOs(s); err != nil {
			return "", fmt.Errorf("%s's slo %q: %w", results.ConfigPath(p), s, err)
		}
		slo = s
	}
	return slo, nil
}

// renderer is output a command writes to a file or stdout (a report, a
// plan's HTML page).
type renderer interface{ Write(io.Writer) error }

// writeReport writes r to the named file, or to the default one, or to
// stdout ("" or "-"); a file's path is printed to stdout.
func writeReport(r renderer, output, defaultFile string, stdout io.Writer) error {
	if output == "" {
		output = defaultFile
	}
	if output == "" || output == "-" {
		return r.Write(stdout)
	}
	f, err := os.Create(output)
	if err != nil {
		return fmt.Errorf("output: %w", err)
	}
	if err := r.Write(f); err != nil {
		_ = f.Close() // the write's error is the one to report
		return fmt.Errorf("writing %s: %w", output, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("output: %w", err)
	}
	_, err = fmt.Fprintf(stdout, "report written to %s\n", output)
	return err
}
