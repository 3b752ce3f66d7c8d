package gateway

import (
	"context"
	"fmt"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokentrace/tokentrace/internal/openaitest"
)

func TestSpanPerRequestWithStageEventsAndPropagation(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a", Timing: openaitest.Timing})
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	g := quickGateway(t, up.URL())
	g.Tracer = tp.Tracer("test")
	gw := startGateway(t, g)

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	parent := fmt.Sprintf("00-%s-00f067aa0ba902b7-01", traceID)
	s, _, body := do(t, gw.URL, chatBody("m", true, "hi", ""), map[string]string{"Traceparent": parent})
	if s != 200 {
		t.Fatalf("%d %s", s, body)
	}
	var requests, stages tracetest.SpanStubs
	for _, sp := range exp.GetSpans() {
		if sp.SpanKind == trace.SpanKindServer {
			requests = append(requests, sp)
		} else {
			stages = append(stages, sp)
		}
	}
	if len(requests) != 1 {
		t.Fatalf("%d request spans, want 1", len(requests))
	}
	sp := requests[0]
	// One child span per stage, in path order, laid end to end.
	var names []string
	for i, st := range stages {
		names = append(names, st.Name)
		if st.Parent.SpanID() != sp.SpanContext.SpanID() || st.SpanContext.TraceID() != sp.SpanContext.TraceID() {
			t.Errorf("stage span %s is not a child of the request's", st.Name)
		}
		if i > 0 && !st.StartTime.Equal(stages[i-1].EndTime) {
			t.Errorf("stage span %s starts at %v, the previous ended at %v", st.Name, st.StartTime, stages[i-1].EndTime)
		}
	}
	if got := strings.Join(names, ","); got != "gateway gateway_in,gateway gateway_queue,gateway connect,gateway upstream_ttft,gateway decode,gateway post_process,gateway backpressure" {
		t.Errorf("stage spans %s", got)
	}
	if sp.SpanContext.TraceID().String() != traceID || sp.Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("span trace %s parent %s, want the client's", sp.SpanContext.TraceID(), sp.Parent.SpanID())
	}
	var events []string
	for _, e := range sp.Events {
		events = append(events, e.Name)
	}
	// No reasoning: the first token is the first answer token.
	if got := strings.Join(events, ","); got != "queued,admitted,first_token,first_answer" {
		t.Errorf("events %s", got)
	}
	attrs := map[string]bool{}
	for _, a := range sp.Attributes {
		attrs[string(a.Key)] = true
	}
	for _, k := range []string{"gen_ai.request.model", "tokentrace.stage.upstream_ttft", "tokentrace.stage.prefill", "tokentrace.stage.decode"} {
		if !attrs[k] {
			t.Errorf("span lacks attribute %s", k)
		}
	}
	// Upstream sees the gateway's span as parent, in the client's trace.
	got := up.Headers()[0].Get("Traceparent")
	want := fmt.Sprintf("00-%s-%s-01", traceID, sp.SpanContext.SpanID())
	if got != want {
		t.Errorf("upstream traceparent %q, want %q", got, want)
	}
}

func TestTraceparentPassedThroughWithoutTracer(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a"})
	gw := startGateway(t, quickGateway(t, up.URL()))
	parent := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	do(t, gw.URL, chatBody("m", false, "hi", ""), map[string]string{"Traceparent": parent})
	if got := up.Headers()[0].Get("Traceparent"); got != parent {
		t.Errorf("upstream traceparent %q, want %q", got, parent)
	}
}
