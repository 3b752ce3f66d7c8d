package tracing

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/redact"
)

// Propagator reads and writes the W3C traceparent and tracestate headers.
var Propagator = propagation.TraceContext{}

// ValidateEndpoint checks an OTLP/HTTP endpoint (http://host:4318, an
// optional path); the error quotes it with any credentials masked.
func ValidateEndpoint(endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("otlp endpoint %q: want http://host:port or https://…", redact.URL(endpoint))
	}
	return nil
}

// NewProvider exports spans in batches over OTLP/HTTP (protobuf) to
// endpoint (e.g. http://localhost:4318; a path other than / replaces
// /v1/traces), as service. Shut it down to flush.
func NewProvider(ctx context.Context, endpoint, service string) (*sdktrace.TracerProvider, error) {
	if err := ValidateEndpoint(endpoint); err != nil {
		return nil, err
	}
	u, _ := url.Parse(endpoint)
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(u.Host)}
	if u.Scheme == "http" {
		opts = append(opts, otlptracehttp.WithInsecure())
	}
	if u.Path != "" && u.Path != "/" {
		opts = append(opts, otlptracehttp.WithURLPath(u.Path))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", service))
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// Extract returns ctx carrying the remote span context of a request's
// traceparent, if it has a valid one.
func Extract(ctx context.Context, h http.Header) context.Context {
	return Propagator.Extract(ctx, propagation.HeaderCarrier(h))
}

// Inject sets traceparent (and tracestate) on h for the span in ctx.
func Inject(ctx context.Context, h http.Header) {
	Propagator.Inject(ctx, propagation.HeaderCarrier(h))
}

// Stage is one stage of a hop's partition of a request, for StageSpans.
type Stage struct {
	Name latency.TimingName
	D    time.Duration
	// Summed marks a stage that is the sum of interleaved intervals (a
	// stream's decode and its post-processing alternate event by event):
	// its span has the right duration but not the instants it ran at.
	Summed bool
}

// StageSpans adds one child span of parent per stage, laid end to end from
// start in the order given (the hop's path order), so that each span lasts
// exactly its stage's duration and the spans together cover the hop's
// time. Spans are named "HOP STAGE" and carry tokentrace.hop,
// tokentrace.stage and, for summed stages, tokentrace.stage.summed.
func StageSpans(parent context.Context, tr trace.Tracer, start time.Time, stages []Stage) {
	at := start
	for _, s := range stages {
		hop, name := s.Name.Split()
		attrs := []attribute.KeyValue{attribute.String("tokentrace.hop", string(hop)), attribute.String("tokentrace.stage", name)}
		if s.Summed {
			attrs = append(attrs, attribute.Bool("tokentrace.stage.summed", true))
		}
		_, sp := tr.Start(parent, string(hop)+" "+name, trace.WithTimestamp(at), trace.WithAttributes(attrs...))
		at = at.Add(s.D)
		sp.End(trace.WithTimestamp(at))
	}
}
