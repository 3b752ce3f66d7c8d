package cli

import (
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/spf13/cobra"

	"github.com/tokentrace/tokentrace/internal/app"
)

func newAppCmd() *cobra.Command {
	cfg := app.DefaultConfig()
	listen := listenAddr{Host: "127.0.0.1", Port: 8090}
	var otlpEndpoint string
	var g *flagGroup
	cmd := &cobra.Command{
		Use:   "app",
		Short: "Run a reference RAG application with guardrails whose every stage is measured",
		Long: `app is a small retrieval-augmented chat service in front of a model: for each
request to its OpenAI-compatible /v1/chat/completions it retrieves passages
from an in-memory vector index over a bundled corpus (one call per source,
sequential or parallel, each with an added latency standing for a remote
store), reranks them, puts them in the prompt (so they lengthen what the model
prefills), calls the model directly or through a tokentrace gateway, and
checks the answer with an output guardrail that either buffers the whole
answer (blocking) or checks it as it streams (streaming).

Every stage goes out in Server-Timing (header, trailer and the final SSE
comment) as app.in, app.retrieval, app.rerank, app.prompt, app.upstream,
app.guardrail, app.post_process, app.backpressure and app.total, followed by
the stages of the gateway and the server behind it, so tokentrace bench and
report split a request's latency across the whole path (docs/app.md).

Exit status: 0 after a clean stop, 2 for bad flags, 1 when it cannot listen
(docs/cli.md).`,
		Example: `  tokentrace serve --port 8000 &
  tokentrace app --upstream http://127.0.0.1:8000 --retrieval parallel --guardrail streaming
  tokentrace bench --url http://127.0.0.1:8090 --rate 5 --requests 200`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.finish(); err != nil {
				return usageError(fmt.Errorf("app: %w", err), g)
			}
			addr, err := listen.addr()
			if err != nil {
				return usageError(fmt.Errorf("app: %w", err), g)
			}
			if cfg.APIKey == "" {
				cfg.APIKey = os.Getenv("OPENAI_API_KEY")
			}
			tracer, stopTracing, err := startTracing(cmd.Context(), otlpEndpoint, "tokentrace-app", cmd.ErrOrStderr())
			if err != nil {
				return usageError(fmt.Errorf("app: %w", err), g)
			}
			defer stopTracing()
			cfg.Tracer = tracer
			cfg.Log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			srv, err := app.NewServer(cfg)
			if err != nil {
				return usageError(fmt.Errorf("app: %w", err), g)
			}
			ln, err := (&net.ListenConfig{}).Listen(cmd.Context(), "tcp", addr)
			if err != nil {
				return fmt.Errorf("app: listen: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\napp: listening on http://%s/v1\n", srv.Describe(), ln.Addr())
			return srv.Serve(cmd.Context(), ln)
		},
	}
	f := cmd.Flags()
	g = newFlagGroup(f, "", "")
	bindListenFlags(g, &listen)
	bindAppFlags(g, &cfg)
	bindTracingFlag(g, &otlpEndpoint)
	return cmd
}

// bindAppFlags binds the application's settings.
func bindAppFlags(g *flagGroup, cfg *app.Config) {
	g.stringVar(&cfg.Upstream, "upstream", "base URL of the model's OpenAI-compatible server or of a gateway in front of it, e.g. http://127.0.0.1:8000")
	g.stringVar(&cfg.Model, "model", "model name sent upstream (default: the client's)")
	g.stringVar(&cfg.APIKey, "api-key", "bearer token sent upstream (default: $OPENAI_API_KEY)")
	g.intVar(&cfg.Sources, "sources", "retrieval calls per request, one per source (shard of the index)")
	g.stringVar(&cfg.Retrieval, "retrieval", "sequential (one call after another) or parallel (all at once)")
	g.stringVar(&cfg.RetrievalLatency, "retrieval-latency", "latency added to each retrieval call: 0, 20ms, uniform:10ms-30ms, lognormal:mean=20ms,sigma=0.5, …")
	g.intVar(&cfg.Candidates, "candidates", "passages each retrieval call returns")
	g.intVar(&cfg.TopK, "top-k", "passages, after reranking, put in the prompt (0: the question alone)")
	g.stringVar(&cfg.Guardrail, "guardrail", "output guardrail: streaming (check as tokens arrive), blocking (buffer the whole answer, then check) or off")
	g.durationVar(&cfg.GuardrailCost, "guardrail-cost", "the output check's cost per token, standing for a safety classifier")
	g.stringArrayVar(&cfg.Blocklist, "blocklist", "a word the output filter masks (repeatable; API keys and e-mail addresses always are)")
	g.durationVar(&cfg.UpstreamTimeout, "upstream-timeout", "longest wait for one answer from upstream (0: 10m)")
	g.int64Var(&cfg.MaxResponseBytes, "max-response-bytes", "largest answer the app holds (a whole answer, or one the blocking guardrail checks); beyond it 502 upstream_response_too_large (0: 64 MiB)")
	g.uint64Var(&cfg.Seed, "seed", "seed of the retrieval latency draws")
	g.durationVar(&cfg.Limits.ReadHeaderTimeout, "read-header-timeout", "deadline for a request's headers")
	g.durationVar(&cfg.Limits.BodyTimeout, "body-timeout", "deadline for a request's body, from the end of its headers (408 after it)")
	g.durationVar(&cfg.Limits.IdleTimeout, "idle-timeout", "how long a keep-alive connection may wait for its next request")
	g.intVar(&cfg.Limits.MaxConns, "max-connections", "most client connections open at once (0: from the descriptor limit)")
	g.durationVar(&cfg.Grace, "grace", "after a stop (Ctrl-C), how long in-flight requests may finish")
}
