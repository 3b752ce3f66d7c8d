package cli

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/tokentrace/tokentrace/internal/gateway"
)

func init() { register(newGatewayCmd) }

func newGatewayCmd() *cobra.Command {
	var rc gateway.RunConfig
	var verbose bool
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
(hot-reloaded; see docs/gateway.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			level := slog.LevelInfo
			if verbose {
				level = slog.LevelDebug
			}
			rc.Log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
			return gateway.Run(cmd.Context(), rc)
		},
	}
	f := cmd.Flags()
	f.StringVar(&rc.Addr, "addr", "127.0.0.1:8080", "listen address")
	f.StringArrayVar(&rc.Upstreams, "upstream", nil, "upstream base URL, e.g. http://localhost:8000 (repeatable; quick start without a config)")
	f.StringVar(&rc.ConfigPath, "config", "", "YAML configuration file (watched and reloaded on change)")
	f.DurationVar(&rc.ReloadInterval, "reload-interval", 2*time.Second, "how often the config file is checked for changes")
	f.DurationVar(&rc.DrainDelay, "drain-delay", 0, "after SIGTERM/Ctrl-C, how long to keep accepting requests while /health answers 503 (load balancers take the replica out)")
	f.DurationVar(&rc.Grace, "grace", gateway.DefaultGrace, "after a stop (SIGTERM/Ctrl-C, then --drain-delay), how long in-flight requests may finish before their connections are closed (0: the default)")
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
	return cmd
}
