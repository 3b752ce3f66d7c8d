package tracing

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
)

// GenAISemconvVersion is the version of the OpenTelemetry semantic
// conventions for generative AI whose metric names, units, attributes and
// bucket boundaries GenAIServer follows (docs/metrics.md, "OpenTelemetry
// GenAI metrics"). Those conventions are in Development status.
const GenAISemconvVersion = "1.41.0"

// The GenAI metric names and units of GenAISemconvVersion.
const (
	MetricServerTTFT     = "gen_ai.server.time_to_first_token"
	MetricServerTPOT     = "gen_ai.server.time_per_output_token"
	MetricServerDuration = "gen_ai.server.request.duration"
	MetricTokenUsage     = "gen_ai.client.token.usage"
	MetricClientDuration = "gen_ai.client.operation.duration"
	MetricClientTTFC     = "gen_ai.client.operation.time_to_first_chunk"
	UnitSeconds          = "s"
	UnitTokens           = "{token}"
)

// The conventions' advised explicit bucket boundaries.
var (
	ttftBounds     = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}
	tpotBounds     = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5}
	durationBounds = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	tokenBounds    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
)

// GenAIBounds is the conventions' advised bucket boundaries of the named
// GenAI metric (a fresh copy), nil for a name not of this package.
func GenAIBounds(name string) []float64 {
	switch name {
	case MetricServerTTFT, MetricClientTTFC:
		return slices.Clone(ttftBounds)
	case MetricServerTPOT:
		return slices.Clone(tpotBounds)
	case MetricServerDuration, MetricClientDuration:
		return slices.Clone(durationBounds)
	case MetricTokenUsage:
		return slices.Clone(tokenBounds)
	}
	return nil
}

// PromName is the Prometheus name an OTLP metric of this unit is given
// by the OpenTelemetry-to-Prometheus translation (the Collector's
// prometheus exporter, Prometheus's own OTLP receiver with
// UnderscoreEscapingWithSuffixes): dots to underscores, the unit "s" as
// a _seconds suffix, a unit in braces ("{token}", an annotation) dropped.
// gen_ai.server.time_to_first_token in s is
// gen_ai_server_time_to_first_token_seconds; gen_ai.client.token.usage
// in {token} is gen_ai_client_token_usage.
func PromName(name, unit string) string {
	n := strings.ReplaceAll(name, ".", "_")
	switch {
	case unit == UnitSeconds:
		return n + "_seconds"
	case unit == "" || strings.HasPrefix(unit, "{"):
		return n
	}
	return n + "_" + unit
}

// PromLabel is the Prometheus label an attribute is translated to:
// gen_ai.token.type is gen_ai_token_type.
func PromLabel(attr string) string { return strings.ReplaceAll(attr, ".", "_") }

// The GenAI attributes this package records.
const (
	AttrOperation     = "gen_ai.operation.name"
	AttrProvider      = "gen_ai.provider.name"
	AttrRequestModel  = "gen_ai.request.model"
	AttrResponseModel = "gen_ai.response.model"
	AttrTokenType     = "gen_ai.token.type"
	AttrErrorType     = "error.type"
)

// NewMeterProvider exports metrics over OTLP/HTTP (protobuf) to endpoint
// (as NewProvider: http://localhost:4318, a path other than / replacing
// /v1/metrics) every interval, as service. Shut it down to flush.
func NewMeterProvider(ctx context.Context, endpoint, service string, interval time.Duration) (*sdkmetric.MeterProvider, error) {
	if err := ValidateEndpoint(endpoint); err != nil {
		return nil, err
	}
	u, _ := url.Parse(endpoint)
	opts := []otlpmetrichttp.Option{otlpmetrichttp.WithEndpoint(u.Host)}
	if u.Scheme == "http" {
		opts = append(opts, otlpmetrichttp.WithInsecure())
	}
	if u.Path != "" && u.Path != "/" {
		opts = append(opts, otlpmetrichttp.WithURLPath(u.Path))
	}
	exp, err := otlpmetrichttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp metric exporter: %w", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", service))
	return sdkmetric.NewMeterProvider(sdkmetric.WithResource(res),
		sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(interval)))), nil
}

// GenAIRequest is one finished request as a GenAI metric sees it.
type GenAIRequest struct {
	// Operation is gen_ai.operation.name: "chat" or "text_completion".
	Operation string
	// Model is the model asked for and answering.
	Model string
	// TTFT is the time to the first output token (0: none, e.g. a whole
	// answer); TPOT the time per output token after it (0: fewer than two
	// tokens); Duration the request's.
	TTFT, TPOT, Duration time.Duration
	// InputTokens and OutputTokens are usage's counts.
	InputTokens, OutputTokens int
	// ErrorType is error.type for a failed request ("" for success).
	ErrorType string
}

// GenAIServer records a model server's GenAI metrics (serve, the
// gateway): time to first token, time per output token, request duration
// and token usage, named and bucketed as GenAISemconvVersion says. A nil
// *GenAIServer records nothing.
type GenAIServer struct {
	ttft, tpot, dur metric.Float64Histogram
	usage           metric.Int64Histogram
	provider        string
}

// NewGenAIServer makes a model server's instruments on mp; provider is
// gen_ai.provider.name.
func NewGenAIServer(mp metric.MeterProvider, provider string) (*GenAIServer, error) {
	return newGenAI(mp, provider, MetricServerTTFT, MetricServerTPOT, MetricServerDuration)
}

// NewGenAIClient makes a client's instruments on mp (bench): the
// operation's duration, its time to the first chunk and token usage;
// Record's TPOT is then not recorded (the conventions' client
// time_per_output_chunk is per chunk, which bench's records hold and
// report prints as ICL).
func NewGenAIClient(mp metric.MeterProvider, provider string) (*GenAIServer, error) {
	return newGenAI(mp, provider, MetricClientTTFC, "", MetricClientDuration)
}

func newGenAI(mp metric.MeterProvider, provider, ttftName, tpotName, durName string) (*GenAIServer, error) {
	m := mp.Meter("github.com/tokentrace/tokentrace/internal/tracing")
	g := &GenAIServer{provider: provider}
	var err error
	if g.ttft, err = m.Float64Histogram(ttftName, metric.WithUnit(UnitSeconds),
		metric.WithDescription("Time to generate (or receive) the first token (chunk) of successful responses."),
		metric.WithExplicitBucketBoundaries(ttftBounds...)); err != nil {
		return nil, err
	}
	if tpotName != "" {
		if g.tpot, err = m.Float64Histogram(tpotName, metric.WithUnit(UnitSeconds),
			metric.WithDescription("Time per output token generated after the first token for successful responses."),
			metric.WithExplicitBucketBoundaries(tpotBounds...)); err != nil {
			return nil, err
		}
	}
	if g.dur, err = m.Float64Histogram(durName, metric.WithUnit(UnitSeconds),
		metric.WithDescription("Generative AI request (operation) duration, to the last byte."),
		metric.WithExplicitBucketBoundaries(durationBounds...)); err != nil {
		return nil, err
	}
	if g.usage, err = m.Int64Histogram(MetricTokenUsage, metric.WithUnit(UnitTokens),
		metric.WithDescription("Number of input and output tokens used."),
		metric.WithExplicitBucketBoundaries(tokenBounds...)); err != nil {
		return nil, err
	}
	return g, nil
}

// Record adds one finished request.
func (g *GenAIServer) Record(ctx context.Context, r GenAIRequest) {
	if g == nil {
		return
	}
	base := []attribute.KeyValue{attribute.String(AttrOperation, r.Operation),
		attribute.String(AttrProvider, g.provider), attribute.String(AttrRequestModel, r.Model),
		attribute.String(AttrResponseModel, r.Model)}
	if r.ErrorType != "" {
		g.dur.Record(ctx, r.Duration.Seconds(), metric.WithAttributes(append(base, attribute.String(AttrErrorType, r.ErrorType))...))
		return
	}
	set := metric.WithAttributes(base...)
	g.dur.Record(ctx, r.Duration.Seconds(), set)
	if r.TTFT > 0 {
		g.ttft.Record(ctx, r.TTFT.Seconds(), set)
	}
	if r.TPOT > 0 && g.tpot != nil {
		g.tpot.Record(ctx, r.TPOT.Seconds(), set)
	}
	g.usage.Record(ctx, int64(r.InputTokens), metric.WithAttributes(append(base, attribute.String(AttrTokenType, "input"))...))
	g.usage.Record(ctx, int64(r.OutputTokens), metric.WithAttributes(append(base, attribute.String(AttrTokenType, "output"))...))
}
