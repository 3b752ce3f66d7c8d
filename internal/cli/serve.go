package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tokentrace/tokentrace/internal/serve"
)

func init() { register(newServeCmd) }

func newServeCmd() *cobra.Command {
	opts := serve.DefaultOptions()
	var configPath string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve a step-level simulated inference engine behind an OpenAI-compatible API",
		Long: `serve runs a simulated LLM inference engine (continuous batching under a
token budget, chunked prefill, paged KV cache, prefix caching, preemption,
optional speculative decoding) whose step times come from the performance
model, behind an OpenAI-compatible API: /v1/chat/completions, /v1/completions,
/v1/models, /health and vLLM's /metrics. See docs/serve.md.

Every flag can also be given in a YAML file (--config) under the same name;
flags given on the command line win.`,
		Example: `  tokentrace serve --model Llama-3.1-8B --gpu H100-SXM --port 8000
  tokentrace serve --config serve.yaml --enable-prefix-caching
  tokentrace serve --max-waiting 64 --fault-503-rate 0.01 --fault-seed 7`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configPath != "" {
				if err := serve.ApplyConfigFile(configPath, cmd.Flags()); err != nil {
					return &ExitError{Code: 2, Err: err}
				}
			}
			cfg, err := opts.Config()
			if err != nil {
				return &ExitError{Code: 2, Err: fmt.Errorf("serve: %w", err)}
			}
			srv, err := serve.Start(cmd.Context(), cfg, opts.Addr())
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			fmt.Fprintln(cmd.OutOrStdout(), srv.Describe())
			<-cmd.Context().Done()
			return srv.Close()
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "YAML file of settings named like the flags")
	opts.BindFlags(cmd.Flags())
	return cmd
}
