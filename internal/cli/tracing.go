package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/redact"
	"github.com/tokentrace/tokentrace/internal/tracing"
)

// bindTracingFlag binds --otlp-endpoint (serve, app, bench; the gateway's
// otlp_endpoint in its configuration file).
func bindTracingFlag(g *flagGroup, endpoint *string) {
	g.stringVar(endpoint, "otlp-endpoint", "export spans over OTLP/HTTP to this collector, e.g. http://localhost:4318 (default: none)")
}

// startTracing returns a tracer exporting to endpoint as service and a
// stop function that flushes it (reporting a failure on stderr), or a nil
// tracer and a no-op when endpoint is empty.
func startTracing(ctx context.Context, endpoint, service string, stderr io.Writer) (trace.Tracer, func(), error) {
	if endpoint == "" {
		return nil, func() {}, nil
	}
	if err := tracing.ValidateEndpoint(endpoint); err != nil {
		return nil, nil, field.Invalid("otlp_endpoint", redact.URL(endpoint), "want http://host:port or https://…")
	}
	tp, err := tracing.NewProvider(ctx, endpoint, service)
	if err != nil {
		return nil, nil, err
	}
	stop := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			fmt.Fprintf(stderr, "%s: spans not exported at exit: %v\n", service, err)
		}
	}
	return tp.Tracer("github.com/tokentrace/tokentrace/" + service), stop, nil
}
