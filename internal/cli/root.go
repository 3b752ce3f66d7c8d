// Package cli holds tokentrace's command line: one file per subcommand, each
// turning flags into a typed configuration and calling the package that does
// the work. No logic lives here.
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// Version is set at build time with -ldflags "-X .../internal/cli.Version=v1.2.3".
var Version = "dev"

// ExitError carries a process exit status out of a command, with an optional
// message. bench uses it to report failed SLOs with a distinct status.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

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
	root.AddCommand(newVersionCmd())
	for _, add := range subcommands {
		root.AddCommand(add())
	}
	return root
}

// subcommands is filled by each subcommand's file in its init function, so
// that adding a command touches only its own file.
var subcommands []func() *cobra.Command

func register(f func() *cobra.Command) { subcommands = append(subcommands, f) }

// Main runs the command line and returns the process exit status.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := NewRoot()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Err != nil {
			fmt.Fprintln(os.Stderr, "tokentrace:", ee.Err)
		}
		return ee.Code
	}
	fmt.Fprintln(os.Stderr, "tokentrace:", err)
	return 1
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
