package gateway

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/tracing"
)

// spanRecorder is one request's span; its zero value (no tracer) records
// nothing but still carries the client's traceparent upstream.
type spanRecorder struct {
	span   trace.Span
	tracer trace.Tracer
	// passthrough headers when there is no tracer
	traceparent, tracestate string
}

// startSpan begins the request's span as a child of the client's
// traceparent, if any.
func (g *Gateway) startSpan(r *http.Request, id string) (context.Context, spanRecorder) {
	if g.Tracer == nil {
		return r.Context(), spanRecorder{traceparent: r.Header.Get("Traceparent"), tracestate: r.Header.Get("Tracestate")}
	}
	ctx := tracing.Extract(r.Context(), r.Header)
	ctx, span := g.Tracer.Start(ctx, "gateway "+r.URL.Path, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path),
			attribute.String("tokentrace.request_id", id)))
	return ctx, spanRecorder{span: span, tracer: g.Tracer}
}

// inject sets traceparent (and tracestate) on an upstream request: the
// gateway's span as parent, or the client's header passed through.
func (s *spanRecorder) inject(h http.Header) {
	if s.span != nil {
		tracing.Inject(trace.ContextWithSpan(context.Background(), s.span), h)
		return
	}
	if s.traceparent != "" {
		h.Set("Traceparent", s.traceparent)
		if s.tracestate != "" {
			h.Set("Tracestate", s.tracestate)
		}
	}
}

// event adds a stage event to the span.
func (s *spanRecorder) event(name string) {
	if s.span != nil {
		s.span.AddEvent(name)
	}
}

// eventAt adds an event that happened at t (recorded later).
func (s *spanRecorder) eventAt(name string, t time.Time) {
	if s.span != nil {
		s.span.AddEvent(name, trace.WithTimestamp(t))
	}
}

// end sets the request's attributes (GenAI names where they exist, the
// stage durations in seconds), adds one child span per stage (laid end to
// end from the handler's start: the partition of its Server-Timing) and
// ends the span.
func (s *spanRecorder) end(x *exchange, st stageDurations) {
	if s.span == nil {
		return
	}
	attrs := []attribute.KeyValue{
		attribute.Int("http.response.status_code", x.status),
		attribute.String("gen_ai.request.model", x.req.Model),
		attribute.Int("gen_ai.request.max_tokens", x.req.MaxTokens),
		attribute.Int("gen_ai.usage.input_tokens", x.req.InputTokens()),
		attribute.Int("gen_ai.usage.output_tokens", x.tokens),
		stageAttr(latency.TimingGatewayIn, st.In),
		stageAttr(latency.TimingGatewayQueue, st.Queue),
		stageAttr(latency.TimingConnect, st.Connect),
		stageAttr(latency.TimingUpstreamTTFT, st.UpstreamTTFT),
		stageAttr(latency.TimingDecode, st.Decode),
		stageAttr(latency.TimingPostProcess, st.Post),
		stageAttr(latency.TimingBackpressure, st.Backpressure),
	}
	if x.pool != nil {
		attrs = append(attrs, attribute.String("tokentrace.pool", x.pool.name))
	}
	if sp, ok := x.tl.split(st.UpstreamTTFT); ok {
		if sp.hasQueue {
			attrs = append(attrs, stageAttr(latency.TimingServerQueue, sp.queue))
		}
		if sp.hasPrefill {
			attrs = append(attrs, stageAttr(latency.TimingPrefill, sp.prefill))
		}
		if sp.hasNetwork {
			attrs = append(attrs, stageAttr(latency.TimingNetwork, sp.network))
		}
	}
	if e := x.engineSplit; e != nil && !x.tl.splitForwarded {
		attrs = append(attrs, attribute.String("tokentrace.server.evidence", e.Source))
		if e.Engine != "" {
			attrs = append(attrs, attribute.String("tokentrace.server.engine", e.Engine))
		}
	}
	s.span.SetAttributes(attrs...)
	if x.errKind != "" {
		s.span.SetStatus(codes.Error, x.errKind)
	}
	stages := make([]tracing.Stage, 0, 8)
	stages = append(stages, tracing.Stage{Name: latency.TimingGatewayIn, D: st.In}, tracing.Stage{Name: latency.TimingGatewayQueue, D: st.Queue})
	if !x.tl.prefilled.IsZero() {
		stages = append(stages, tracing.Stage{Name: latency.TimingUpstreamPrefill, D: st.UpstreamPrefill})
		s.span.SetAttributes(pdAttrs([]attribute.KeyValue{stageAttr(latency.TimingUpstreamPrefill, st.UpstreamPrefill)}, &x.tl.pd)...)
	}
	stages = append(stages, tracing.Stage{Name: latency.TimingConnect, D: st.Connect}, tracing.Stage{Name: latency.TimingUpstreamTTFT, D: st.UpstreamTTFT},
		tracing.Stage{Name: latency.TimingDecode, D: st.Decode, Summed: true}, tracing.Stage{Name: latency.TimingPostProcess, D: st.Post, Summed: true},
		tracing.Stage{Name: latency.TimingBackpressure, D: st.Backpressure, Summed: true})
	tracing.StageSpans(trace.ContextWithSpan(context.Background(), s.span), s.tracer, x.tl.start, stages)
	s.span.End()
}

// pdAttrs appends a disaggregated request's hops, as its two instances
// reported them, as stage attributes.
func pdAttrs(attrs []attribute.KeyValue, pd *pdStages) []attribute.KeyValue {
	if pd.hasPrefill {
		attrs = append(attrs, stageAttr(latency.TimingName(latency.PrefillQueue), pd.prefillQueue), stageAttr("prefill_instance.prefill", pd.prefill))
	}
	if pd.hasDecode {
		attrs = append(attrs, stageAttr(latency.TimingKVTransfer, pd.kvTransfer), stageAttr(latency.TimingDecodeQueue, pd.decodeQueue),
			stageAttr(latency.TimingFirstDecode, pd.firstDecode))
	}
	return attrs
}

// stageAttr is a stage's span attribute: tokentrace.stage.<its
// Server-Timing name>, in seconds.
func stageAttr(name latency.TimingName, d time.Duration) attribute.KeyValue {
	return attribute.Float64("tokentrace.stage."+string(name), d.Seconds())
}

// NewOTLPTracerProvider exports spans over OTLP/HTTP to endpoint (e.g.
// http://localhost:4318) as tokentrace-gateway. Shut it down to flush.
func NewOTLPTracerProvider(ctx context.Context, endpoint string) (*sdktrace.TracerProvider, error) {
	return tracing.NewProvider(ctx, endpoint, "tokentrace-gateway")
}
