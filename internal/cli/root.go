package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tokentrace/tokentrace/internal/field"
)

// Version is set at build time with -ldflags "-X .../internal/cli.Version=v1.2.3".
var Version = "dev"

// NewRoot builds the root command with every subcommand attached.
func NewRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "tokentrace",
		Short: "Measure, explain and cut the latency of LLM serving",
		Long: `tokentrace measures, explains and cuts the latency of LLM serving.

An LLM request's latency is queue wait + prefill (TTFT) + decode (TPOT × output
tokens) + network + post-processing. tokentrace estimates each term from first
principles, serves a step-level simulated engine, benchmarks any
OpenAI-compatible server, reports where the time went against your SLOs, and
proxies traffic while measuring and defending every stage.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// A flag that does not parse is bad input, for every command.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &ExitError{Code: ExitUsage, Err: err}
	})
	// Marks that a command got past cobra's checks (command name,
	// arguments, flags): an error before this is bad usage.
	root.PersistentPreRun = func(cmd *cobra.Command, _ []string) {
		cmd.Root().Annotations = map[string]string{startedKey: "yes"}
	}
	// Every subcommand, in one place (cobra lists them sorted in help).
	root.AddCommand(
		newEstimateCmd(),
		newServeCmd(),
		newBenchCmd(),
		newReportCmd(),
		newGatewayCmd(),
		newSimulateCmd(),
		newCalibrateCmd(),
		newPlanCmd(),
		newAppCmd(),
		newVersionCmd(),
	)
	return root
}

// Main runs the command line and returns the process exit status.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := NewRoot()
	root.SetArgs(args)
	return exitStatus(root, root.ExecuteContext(ctx), os.Stderr)
}

const startedKey = "tokentrace/started"

// exitStatus prints err (if any) and returns the process exit status: the
// ExitError's code, ExitUsage for what cobra rejects before a command runs
// (unknown commands, wrong arguments), ExitFailed for anything else.
func exitStatus(root *cobra.Command, err error, stderr io.Writer) int {
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Err != nil {
			fmt.Fprintln(stderr, "tokentrace:", field.Escape(ee.Err.Error()))
		}
		return ee.Code
	}
	fmt.Fprintln(stderr, "tokentrace:", field.Escape(err.Error()))
	if root.Annotations[startedKey] == "" {
		return ExitUsage
	}
	return ExitFailed
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the tokentrace version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "tokentrace %s\n", Version)
			return err
		},
	}
}
