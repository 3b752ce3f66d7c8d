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
	g.stringVar(endpoint, "otlp-endpoint", "export spans and OpenTelemetry GenAI metrics over OTLP/HTTP to this collector, e.g. http://localhost:4318 (default: none)")
}

// startGenAIMetrics returns the GenAI metrics (a server's, or with client
// a client's) exporting to endpoint as service every 10 s and a stop
// function that flushes them, or nil and a no-op when endpoint is empty
// (checked by startTracing).
func startGenAIMetrics(ctx context.Context, endpoint, service string, client bool, stderr io.Writer) (*tracing.GenAIServer, func(), error) {
	if endpoint == "" {
		return nil, func() {}, nil
	}
	mp, err := tracing.NewMeterProvider(ctx, endpoint, service, 10*time.Second)
	if err != nil {
		return nil, nil, err
	}
	stop := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := mp.Shutdown(sctx); err != nil {
			fmt.Fprintf(stderr, "%s: GenAI metrics not exported at exit: %v\n", service, err)
		}
	}
	newGenAI := tracing.NewGenAIServer
	if client {
		newGenAI = tracing.NewGenAIClient
	}
	g, err := newGenAI(mp, "tokentrace")
	if err != nil {
		stop()
		return nil, nil, err
	}
	return g, stop, nil
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
