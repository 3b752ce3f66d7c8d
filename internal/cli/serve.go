package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tokentrace/tokentrace/internal/serve"
)

func newServeCmd() *cobra.Command {
	opts := serve.DefaultOptions()
	listen := listenAddr{Host: "127.0.0.1", Port: 8000}
	var configPath, otlpEndpoint string
	var g *flagGroup
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve a step-level simulated inference engine behind an OpenAI-compatible API",
		Long: `serve runs a simulated LLM inference engine (continuous batching under a
token budget, chunked prefill, paged KV cache, prefix caching, preemption,
optional speculative decoding) whose step times come from the performance
model, behind an OpenAI-compatible API: /v1/chat/completions, /v1/completions,
/v1/models, /health and vLLM's /metrics. See docs/serve.md.

Every flag can also be given in a YAML file (--config) under the same name;
flags given on the command line win.

Exit status: 0 after a clean stop, 2 for bad flags or settings that cannot
run, 1 when it cannot listen (docs/cli.md).`,
		Example: `  tokentrace serve --model Llama-3.1-8B --gpu H100-SXM --port 8000
  tokentrace serve --config serve.yaml --enable-prefix-caching
  tokentrace serve --max-waiting 64 --fault-503-rate 0.01 --fault-seed 7`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configPath != "" {
				if err := applyConfigFile(configPath, cmd.Flags(), cmd.ErrOrStderr()); err != nil {
					return usageError(err)
				}
			}
			if err := g.finish(); err != nil {
				return usageError(fmt.Errorf("serve: %w", err), g)
			}
			addr, err := listen.addr()
			if err != nil {
				return usageError(fmt.Errorf("serve: %w", err), g)
			}
			cfg, err := opts.Config()
			if err != nil {
				return usageError(fmt.Errorf("serve: %w", err), g)
			}
			tracer, stopTracing, err := startTracing(cmd.Context(), otlpEndpoint, "tokentrace-serve", cmd.ErrOrStderr())
			if err != nil {
				return usageError(fmt.Errorf("serve: %w", err), g)
			}
			defer stopTracing()
			cfg.Tracer = tracer
			genai, stopMetrics, err := startGenAIMetrics(cmd.Context(), otlpEndpoint, "tokentrace-serve", false, cmd.ErrOrStderr())
			if err != nil {
				return usageError(fmt.Errorf("serve: %w", err), g)
			}
			defer stopMetrics()
			cfg.GenAI = genai
			srv, err := serve.Start(cmd.Context(), cfg, addr)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), srv.Describe())
			<-cmd.Context().Done()
			return srv.Close()
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "YAML file of settings named like the flags")
	g = newFlagGroup(f, "", "")
	bindEngineFlags(g, &opts.Engine)
	bindServerFlags(g, &opts)
	g.durationVar(&opts.Grace, "grace", "after a stop (Ctrl-C), how long in-flight requests may finish before the engine ends them with finish reason abort (0: at once)")
	bindRoleFlags(g, &opts)
	bindListenFlags(g, &listen)
	bindTracingFlag(g, &otlpEndpoint)
	return cmd
}
