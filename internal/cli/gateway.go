package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tokentrace/tokentrace/internal/gateway"
)

func newGatewayCmd() *cobra.Command {
	rc := gateway.RunConfig{ReloadInterval: 2 * time.Second, Grace: gateway.DefaultGrace}
	listen := listenAddr{Host: "127.0.0.1", Port: 8080}
	var verbose bool
	var g *flagGroup
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Run an OpenAI-compatible proxy that measures every stage and defends the SLOs",
		Long: `gateway proxies /v1/chat/completions, /v1/completions and /v1/models to
pools of OpenAI-compatible upstreams (tokentrace serve, vLLM, SGLang, TGI,
llama.cpp, Ollama), streams tokens through one event at a time, and measures
each request's stages: gateway-in, queue, connect, upstream TTFT (split into
server queue + prefill + network when the upstream reports it), decode,
post-processing and client backpressure. Stages go out as a Server-Timing
header and trailer, a final SSE comment, Prometheus histograms on /metrics
and, when configured, OpenTelemetry spans.

Quick start:  tokentrace gateway --upstream http://localhost:8000
With policies (queue, deadlines, timeouts, limits, routing): --config gateway.yaml
(hot-reloaded; see docs/gateway.md).

Exit status: 0 after a clean stop, 2 for bad flags or a configuration that
does not load, 1 when it cannot listen (docs/cli.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			level := slog.LevelInfo
			if verbose {
				level = slog.LevelDebug
			}
			rc.Log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
			addr, err := listen.addr()
			if err != nil {
				return usageError(fmt.Errorf("gateway: %w", err), g)
			}
			srv, err := gateway.NewServer(rc)
			if err != nil {
				return usageError(fmt.Errorf("gateway: %w", err), g)
			}
			ln, err := (&net.ListenConfig{}).Listen(cmd.Context(), "tcp", addr)
			if err != nil {
				return fmt.Errorf("gateway: listen: %w", err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "tokentrace gateway: point clients at %s (stages on /metrics, Ctrl-C stops)\n", clientURL(ln.Addr()))
			return srv.Serve(cmd.Context(), ln)
		},
	}
	f := cmd.Flags()
	g = newFlagGroup(f, "", "")
	bindListenFlags(g, &listen)
	g.stringArrayVar(&rc.Upstreams, "upstream", "upstream base URL, e.g. http://localhost:8000 (repeatable; quick start without a config)")
	g.stringVar(&rc.ConfigPath, "config", "YAML configuration file (watched and reloaded on change)")
	g.durationVar(&rc.ReloadInterval, "reload-interval", "how often the config file is checked for changes")
	g.durationVar(&rc.DrainDelay, "drain-delay", "after SIGTERM/Ctrl-C, how long to keep accepting requests while /health answers 503 (load balancers take the replica out)")
	g.stringVar(&rc.AdminAddr, "admin-listen", "host:port to serve /health and /metrics on instead of the data port (GET and HEAD only; the data port then answers 404 for them)")
	g.boolVar(&rc.Live, "live", "serve the live view (stages per pool and upstream, admission and shedding) at /live/ on the --admin-listen listener")
	g.durationVar(&rc.LiveWindow, "live-window", "the live view's sliding window (0: 10s)")
	g.durationVar(&rc.Grace, "grace", "after a stop (SIGTERM/Ctrl-C, then --drain-delay), how long in-flight requests may finish before their connections are closed (0: the default)")
	f.BoolVarP(&verbose, "verbose", "v", false, "debug logging")
	cmd.AddCommand(&cobra.Command{
		Use:   "hash-key KEY",
		Short: "Print the SHA-256 of an API key, the form keys take in the gateway config",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), gateway.HashKey(args[0]))
			return err
		},
	})
	cmd.AddCommand(newGatewayApplyCmd())
	return cmd
}

// newGatewayApplyCmd is `gateway apply`: a remedy the gateway owns,
// written into its configuration file, which the running gateway reloads.
func newGatewayApplyCmd() *cobra.Command {
	var a gateway.Apply
	var path string
	var g *flagGroup
	cmd := &cobra.Command{
		Use:   "apply --config FILE LEVER=VALUE...",
		Short: "Apply a remedy the gateway owns to its configuration file; the running gateway reloads it",
		Long: `apply writes levers the gateway owns into its configuration file (comments
and order kept, the result checked as the gateway loads it, the file
replaced in one rename), so that a gateway started with --config FILE
reloads with the remedy applied within its --reload-interval: bench,
report, apply, bench again, then tokentrace verify BEFORE AFTER, which
finds the change in the gateway's configuration evidence
(docs/report.md, "Verify").

Levers:
  ` + strings.Join(gateway.ApplyLevers(), "\n  ") + `

Exit status: 0 when written, 2 for a bad lever or a file that does not
load with it (the file is then unchanged), 1 when it cannot be written.`,
		Example: `  tokentrace gateway apply --config gateway.yaml concurrency=4 max-queue=8
  tokentrace gateway apply --config gateway.yaml --route "*" max-max-tokens=256`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if path == "" {
				return usageError(fmt.Errorf("gateway apply: --config FILE is required"), g)
			}
			a.Levers = args
			notes, err := gateway.ApplyFile(path, a)
			if err != nil {
				if errors.Is(err, gateway.ErrWrite) {
					return fmt.Errorf("gateway apply: %w", err)
				}
				return usageError(fmt.Errorf("gateway apply: %w", err), g)
			}
			for _, n := range notes {
				fmt.Fprintln(cmd.OutOrStdout(), n)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "written to %s: a gateway running with --config %s reloads it\n", path, path)
			return err
		},
	}
	g = newFlagGroup(cmd.Flags(), "", "")
	g.stringVar(&path, "config", "the gateway's YAML configuration file to change")
	g.stringVar(&a.Pool, "pool", "the pool a pool lever applies to (needed when the file has several)")
	g.stringVar(&a.Route, "route", "the route (its model) a route lever applies to (needed when the file has several)")
	return cmd
}

// clientURL is the base URL clients reach a listener at: its address, with
// localhost for one listening on every interface.
func clientURL(a net.Addr) string {
	host := a.String()
	if ta, ok := a.(*net.TCPAddr); ok && ta.IP.IsUnspecified() {
		host = net.JoinHostPort("localhost", fmt.Sprint(ta.Port))
	}
	return "http://" + host + "/v1"
}
