package serve

import (
	"context"
	"math"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/tracing"
	"github.com/tokentrace/tokentrace/internal/tracing/otlptest"
)

// The worked example's request (TestRequestTiming) as spans: the
// request's, a child of the client's traceparent, and one per stage at the
// timeline's own instants.
func TestRequestSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	s := &Server{cfg: Config{Tracer: tp.Tracer("test"), ServedModelName: "m"}}
	r0 := time.Unix(1700000000, 0)
	at := func(us int) time.Time { return r0.Add(time.Duration(us) * time.Microsecond) }
	x := &exchange{received: r0, rid: "req-1", frontend: 400 * time.Microsecond, delay: 250 * time.Millisecond, hasTL: true,
		tl: engine.Timeline{Arrival: at(400), Scheduled: at(10400), FirstToken: at(60400), Finished: at(100400), OutputTokens: 5}}
	req := httptest.NewRequest("POST", "/v1/chat/completions", nil)
	req.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	s.traceRequest(req, x, at(351000))

	type span struct {
		Name       string
		Parent     string
		Start, End time.Duration
	}
	var got []span
	var reqID trace.SpanID
	for _, sp := range exp.GetSpans() {
		if sp.SpanKind == trace.SpanKindServer {
			reqID = sp.SpanContext.SpanID()
		}
	}
	for _, sp := range exp.GetSpans() {
		parent := "client"
		if sp.Parent.SpanID() == reqID {
			parent = "request"
		} else if sp.Parent.SpanID().String() != "00f067aa0ba902b7" {
			parent = sp.Parent.SpanID().String()
		}
		got = append(got, span{sp.Name, parent, sp.StartTime.Sub(r0), sp.EndTime.Sub(r0)})
	}
	ms := func(x float64) time.Duration { return time.Duration(x * float64(time.Millisecond)) }
	want := []span{
		{"server frontend", "request", 0, ms(0.4)},
		{"server server_queue", "request", ms(0.4), ms(10.4)},
		{"server prefill", "request", ms(10.4), ms(60.4)},
		{"server server_decode", "request", ms(60.4), ms(100.4)},
		{"server fault", "request", ms(100.4), ms(350.4)},
		{"serve /v1/chat/completions", "client", 0, ms(351)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("spans (-want +got):\n%s", diff)
	}
}

// The OpenTelemetry GenAI server metrics of the worked example's request,
// exported over OTLP to an in-test receiver: the spec's names and units,
// and the values the timeline gives by hand (TTFT 60.4 ms from arrival,
// TPOT 40 ms / 4, duration 351 ms, 12 input and 5 output tokens).
func TestGenAIMetricsReachAnOTLPReceiver(t *testing.T) {
	rcv := otlptest.NewReceiver(t)
	mp, err := tracing.NewMeterProvider(context.Background(), rcv.URL(), "tokentrace-serve", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	g, err := tracing.NewGenAIServer(mp, "tokentrace")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{cfg: Config{GenAI: g, ServedModelName: "m"}}
	r0 := time.Unix(1700000000, 0)
	at := func(us int) time.Time { return r0.Add(time.Duration(us) * time.Microsecond) }
	x := &exchange{api: openai.APIChat, received: r0, hasTL: true, tl: engine.Timeline{Arrival: at(400), Scheduled: at(10400),
		FirstToken: at(60400), Finished: at(100400), PromptTokens: 12, OutputTokens: 5, Finish: engine.FinishLength}}
	s.recordGenAI(x, at(351000))
	if err := mp.Shutdown(context.Background()); err != nil { // flushes
		t.Fatal(err)
	}
	points, bad := rcv.Points()
	if len(bad) > 0 {
		t.Fatalf("receiver could not decode: %v", bad)
	}
	type got struct {
		Unit  string
		Count uint64
		Sum   float64
	}
	m := map[string]got{}
	for _, p := range points {
		key := p.Metric
		if tt, ok := p.Attrs["gen_ai.token.type"]; ok {
			key += "/" + tt.(string)
		}
		if p.Attrs["gen_ai.operation.name"] != "chat" || p.Attrs["gen_ai.request.model"] != "m" || p.Service != "tokentrace-serve" {
			t.Errorf("%s: attributes %v of service %q", key, p.Attrs, p.Service)
		}
		m[key] = got{p.Unit, p.Count, math.Round(p.Sum*1e6) / 1e6}
	}
	want := map[string]got{
		"gen_ai.server.time_to_first_token":   {"s", 1, 0.0604},
		"gen_ai.server.time_per_output_token": {"s", 1, 0.01},
		"gen_ai.server.request.duration":      {"s", 1, 0.351},
		"gen_ai.client.token.usage/input":     {"{token}", 1, 12},
		"gen_ai.client.token.usage/output":    {"{token}", 1, 5},
	}
	if diff := cmp.Diff(want, m); diff != "" {
		t.Errorf("GenAI metrics (-want +got):\n%s", diff)
	}
}
