package serve

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/tracing"
)

// recordGenAI feeds the GenAI server metrics (over OTLP when configured,
// and /metrics' Prometheus translation) from a finished request, as the
// server saw it: time to first token and per output token from the
// engine's timeline (TPOT = decode / (output tokens − 1)), the duration
// from arrival to end; a request that never reached the engine's end is
// an error.
func (s *Server) recordGenAI(x *exchange, end time.Time) {
	op := "chat"
	if x.api == openai.APICompletions {
		op = "text_completion"
	}
	req := tracing.GenAIRequest{Operation: op, Model: s.cfg.ServedModelName, Duration: end.Sub(x.received)}
	if !x.hasTL || x.tl.Finish == engine.FinishAbort {
		req.ErrorType = "incomplete"
		s.cfg.GenAI.Record(context.Background(), req)
		s.metrics.genAI(req)
		return
	}
	if !x.tl.FirstToken.IsZero() {
		req.TTFT = x.tl.FirstToken.Sub(x.received)
	}
	if n := x.tl.OutputTokens; n >= 2 {
		req.TPOT = x.tl.Decode() / time.Duration(n-1)
	}
	req.InputTokens, req.OutputTokens = x.tl.PromptTokens, x.tl.OutputTokens
	s.cfg.GenAI.Record(context.Background(), req)
	s.metrics.genAI(req)
}

// traceRequest records a request's span (a child of its traceparent, from
// the handler's start to end) and one child span per stage of its
// Server-Timing: frontend, server_queue, prefill and server_decode are the
// timeline's own instants R → A → S → F → E, laid end to end; an injected
// fault delay follows them.
func (s *Server) traceRequest(r *http.Request, x *exchange, end time.Time) {
	tr := s.cfg.Tracer
	ctx := tracing.Extract(context.Background(), r.Header)
	attrs := []attribute.KeyValue{attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path),
		attribute.String("tokentrace.request_id", x.rid)}
	if x.hasTL {
		attrs = append(attrs, attribute.String("gen_ai.request.model", s.cfg.ServedModelName),
			attribute.Int("gen_ai.usage.input_tokens", x.tl.PromptTokens), attribute.Int("gen_ai.usage.output_tokens", x.tl.OutputTokens))
	}
	ctx, sp := tr.Start(ctx, "serve "+r.URL.Path, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(x.received),
		trace.WithAttributes(attrs...))
	stages := []tracing.Stage{{Name: latency.TimingFrontend, D: x.frontend}}
	if x.hasTL {
		q, p, d := x.split()
		stages = append(stages, tracing.Stage{Name: latency.TimingServerQueue, D: q},
			tracing.Stage{Name: latency.TimingPrefill, D: p}, tracing.Stage{Name: latency.TimingServerDecode, D: d})
	}
	if x.delay > 0 {
		stages = append(stages, tracing.Stage{Name: latency.TimingFault, D: x.delay, Summed: true})
	}
	tracing.StageSpans(ctx, tr, x.received, stages)
	sp.End(trace.WithTimestamp(end))
}
