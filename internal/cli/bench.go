package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tokentrace/tokentrace/internal/bench"
	"github.com/tokentrace/tokentrace/internal/serve"
)

func init() { register(newBenchCmd) }

// ExitSLOFailed is bench's exit status when an SLO given with --slo fails.
const ExitSLOFailed = 3

func newBenchCmd() *cobra.Command {
	opts := bench.DefaultOptions()
	sim := serve.DefaultOptions()
	var self bench.SelfTestOptions
	var selfTest bool
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmark an OpenAI-compatible server (or the embedded engine) with numbers that are right",
		Long: `bench sends a workload to an OpenAI-compatible server and measures every
request: TTFT, TPOT, ITL, E2E and their stages, timestamped at the moment bytes
arrive. Requests are scheduled on absolute instants (open loop with --rate,
closed loop with --concurrency, both for a rate with a cap), so latency is
reported from the intended send time too, free of coordinated omission.

With no --url it starts the embedded simulated engine (tokentrace serve) on a
loopback port; its options are the --sim-* flags.

Results go to a folder (--out): requests.jsonl (one record per request,
written as each finishes), summary.json, run.json, command.txt and config.json.
The console summary is tokentrace report's.

Exit status: 0 when the run completed (and every --slo holds), 3 when an SLO
failed, 2 for bad flags, 1 when the run could not happen. See docs/bench.md.`,
		Example: `  tokentrace bench
  tokentrace bench --url http://localhost:8000 --rate 20 --duration 2m --slo "ttft:p99<=1.5s,tpot:p99<=50ms"
  tokentrace bench --url http://localhost:8000 --concurrency 64 --requests 2000 --input-tokens uniform:500-1500
  tokentrace bench --trace ../shared/data/azure-llm-2023/conv.csv --trace-window 0s+2m
  tokentrace bench --sweep auto --slo "ttft:p99<=500ms"
  tokentrace bench --self-test`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			if selfTest {
				return bench.SelfTest(ctx, self, cmd.OutOrStdout())
			}
			changed := func(name string) bool { return cmd.Flags().Changed(name) }
			cfg, err := opts.Config(changed, time.Now())
			if err != nil {
				return &ExitError{Code: 2, Err: fmt.Errorf("bench: %w", err)}
			}
			if cfg.Target.BaseURL == "" {
				scfg, err := sim.Config()
				if err != nil {
					return &ExitError{Code: 2, Err: fmt.Errorf("bench: embedded engine (--sim-* flags): %w", err)}
				}
				cfg.StartEmbedded = func(ctx context.Context) (*bench.Embedded, error) {
					srv, err := serve.Start(ctx, scfg, "127.0.0.1:0")
					if err != nil {
						return nil, err
					}
					return &bench.Embedded{URL: srv.URL(), Describe: srv.Describe(), Close: srv.Close}, nil
				}
			}
			cfg.Command = os.Args
			cfg.Echo = flagValues(cmd.Flags())
			cfg.Log = cmd.ErrOrStderr()
			if isTerminal(os.Stderr) && cmd.ErrOrStderr() == os.Stderr {
				cfg.Progress = os.Stderr
			}
			res, err := bench.Run(ctx, cfg, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			if res.SLOsFailed() {
				return &ExitError{Code: ExitSLOFailed, Err: fmt.Errorf("bench: an SLO failed (%s)", opts.SLO)}
			}
			return nil
		},
	}
	// Flags that do not parse are bad flags too: exit status 2.
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &ExitError{Code: 2, Err: fmt.Errorf("bench: %w", err)}
	})
	f := cmd.Flags()
	opts.BindFlags(f)
	f.BoolVar(&selfTest, "self-test", false, "measure this client's own speed and fidelity against loopback servers, then exit")
	self.BindFlags(f)
	// The embedded engine's options, as tokentrace serve names them, with a
	// sim- prefix (host, port and the model name clients send are bench's).
	simFlags := pflag.NewFlagSet("sim", pflag.ContinueOnError)
	sim.BindFlags(simFlags)
	simFlags.VisitAll(func(fl *pflag.Flag) {
		switch fl.Name {
		case "host", "port":
			return
		}
		f.AddFlag(&pflag.Flag{Name: "sim-" + fl.Name, Usage: "embedded engine: " + fl.Usage,
			Value: fl.Value, DefValue: fl.DefValue, NoOptDefVal: fl.NoOptDefVal})
	})
	return cmd
}

// flagValues is the configuration as given, for config.json (secrets hidden).
func flagValues(fs *pflag.FlagSet) map[string]string {
	m := map[string]string{}
	fs.VisitAll(func(fl *pflag.Flag) {
		v := fl.Value.String()
		if fl.Name == "api-key" && v != "" {
			v = "(set)"
		}
		if fl.Name == "header" && strings.Contains(strings.ToLower(v), "authorization") {
			v = "(set)"
		}
		m[fl.Name] = v
	})
	return m
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
