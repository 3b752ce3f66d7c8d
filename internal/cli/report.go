package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/report"
)

func init() { register(newReportCmd) }

func newReportCmd() *cobra.Command {
	var (
		cfg report.Config
		slo string
	)
	cmd := &cobra.Command{
		Use:   "report RESULTS... | report --compare A B",
		Short: "Report percentiles, stage split, SLO verdicts and a diagnosis from bench results",
		Long: `report reads bench results (folders holding requests.jsonl, or the files
themselves) and says where the time went: percentiles with bootstrap confidence
intervals, each request's end-to-end latency split into stages (client queue,
connect, send, network, server queue, prefill, decode, stream tail), SLO
verdicts with goodput and attainment, and a diagnosis naming the cause of each
breach with the numbers that show it and what to do.

Formats: text (default), md, json (schema in docs/report.md), csv (one line per
request) and html (one self-contained file; -o, default report.html in the
results folder). --compare A B sets two runs side by side and marks each
difference larger than its confidence interval.`,
		Example: `  tokentrace report results/run1
  tokentrace report results/run1 --slo "ttft:p99<=1.5s,tpot:p99<=50ms" --format html
  tokentrace report --compare results/before results/after --format md`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			slos, err := latency.ParseSLOs(slo)
			if err != nil {
				return fmt.Errorf("report: --slo: %w", err)
			}
			cfg.SLOs = slos
			cfg.Paths = args
			return report.Run(cmd.Context(), cfg, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&slo, "slo", "", `objectives, e.g. "ttft:p99<=1.5s,tpot:p99<=50ms,e2e:p95<=10s"`)
	f.StringVarP(&cfg.Format, "format", "f", "text", "output format: "+strings.Join(report.Formats, ", "))
	f.StringVarP(&cfg.Output, "output", "o", "", "write to this file (html defaults to report.html in the results folder)")
	f.BoolVar(&cfg.Compare, "compare", false, "compare two runs: report --compare A B")
	f.Uint64Var(&cfg.Seed, "seed", 1, "seed of the bootstrap's random source")
	f.IntVar(&cfg.Resamples, "resamples", 2000, "bootstrap resamples for confidence intervals")
	f.BoolVar(&cfg.IncludeWarmup, "include-warmup", false, "keep warm-up requests in the results")
	return cmd
}
