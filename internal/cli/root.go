package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &ExitError{Code: ExitUsage, Err: suggestFlag(cmd, err)}
	})
	root.SuggestionsMinimumDistance = 2
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
		newVerifyCmd(),
		newAppCmd(),
		newVersionCmd(),
	)
	return root
}

// suggestFlag adds "did you mean --x?" to pflag's unknown-flag error when
// one of cmd's flags is close to the one given.
func suggestFlag(cmd *cobra.Command, err error) error {
	name, ok := strings.CutPrefix(err.Error(), "unknown flag: --")
	if !ok {
		return err
	}
	var known []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			known = append(known, f.Name)
		}
	})
	if s := field.Suggest(name, known); s != "" {
		return fmt.Errorf("%w: did you mean --%s? (tokentrace %s --help lists them)", err, s, cmd.Name())
	}
	return fmt.Errorf("%w (tokentrace %s --help lists the flags)", err, cmd.Name())
}

// Main runs the command line and returns the process exit status.
func Main(args []string) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go stopOnSignal(sigs, cancel, os.Stderr)
	root := NewRoot()
	root.SetArgs(args)
	return exitStatus(root, root.ExecuteContext(ctx), os.Stderr)
}

// stopOnSignal cancels the commands' context at the first signal from
// sigs, saying so on stderr at once, and stops catching signals, so that
// a second Ctrl-C ends the process the default way.
func stopOnSignal(sigs chan os.Signal, cancel func(), stderr io.Writer) {
	sig, ok := <-sigs
	if !ok {
		return
	}
	signal.Stop(sigs)
	fmt.Fprintf(stderr, "\ntokentrace: %s: stopping — writing what finished (Ctrl-C again quits at once)\n", sig)
	cancel()
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
			bi, _ := debug.ReadBuildInfo()
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "tokentrace %s\n", versionLine(Version, bi))
			return err
		},
	}
}

// versionLine is the version with what the build recorded of its source:
// the commit (12 digits), "modified" when the tree had uncommitted
// changes, and the commit's time, or why a development build has none; the
// Go version; the module version when no -ldflags version was set and go
// install gave one.
func versionLine(version string, bi *debug.BuildInfo) string {
	if bi == nil {
		return version
	}
	if version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		version = bi.Main.Version
	}
	var rev, at string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value[:min(12, len(s.Value))]
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	var parts []string
	if rev != "" {
		c := "commit " + rev
		if dirty {
			c += " (modified)"
		}
		if at != "" {
			c += " " + at
		}
		parts = append(parts, c)
	}
	if bi.GoVersion != "" {
		parts = append(parts, bi.GoVersion)
	}
	s := version
	if len(parts) > 0 {
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	if rev == "" && version == "dev" {
		s += "; no commit recorded: go run (or -buildvcs=false) records none, go build or go install in a git clone does"
	}
	return s
}
