package tracing_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/tracing"
	"github.com/tokentrace/tokentrace/internal/tracing/otlptest"
)

// A request span and its stage spans go over OTLP/HTTP to a receiver as a
// collector gets them: the stages children of the request, laid end to end
// from its start, each as long as its stage; the request a child of the
// traceparent it was given.
func TestStageSpansOverOTLP(t *testing.T) {
	rcv := otlptest.NewReceiver(t)
	ctx := context.Background()
	tp, err := tracing.NewProvider(ctx, rcv.URL(), "test-hop")
	if err != nil {
		t.Fatal(err)
	}
	tr := tp.Tracer("test")
	h := http.Header{}
	h.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	start := time.Unix(1700000000, 0)
	pctx, sp := tr.Start(tracing.Extract(ctx, h), "hop request", trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindServer))
	tracing.StageSpans(pctx, tr, start, []tracing.Stage{
		{Name: latency.TimingAppRetrieval, D: 30 * time.Millisecond},
		{Name: latency.TimingPrefill, D: 12500 * time.Microsecond},
		{Name: latency.TimingAppGuardrail, D: time.Millisecond, Summed: true},
	})
	sp.End(trace.WithTimestamp(start.Add(50 * time.Millisecond)))
	out := http.Header{}
	tracing.Inject(pctx, out)
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	spans, bad := rcv.Spans()
	if len(bad) > 0 {
		t.Fatalf("receiver: %q", bad)
	}
	type row struct {
		Name, Parent, Service, Kind string
		Start, Dur                  time.Duration
		Summed                      any
	}
	var got []row
	var reqID string
	for _, s := range spans {
		if s.Name == "hop request" {
			reqID = s.SpanID
		}
	}
	for _, s := range spans {
		parent := s.ParentID
		if parent == reqID {
			parent = "request"
		}
		if s.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("%s in trace %s", s.Name, s.TraceID)
		}
		got = append(got, row{s.Name, parent, s.Service, s.Kind, s.Start.Sub(start), s.Duration(), s.Attrs["tokentrace.stage.summed"]})
	}
	want := []row{
		{"app retrieval", "request", "test-hop", "SPAN_KIND_INTERNAL", 0, 30 * time.Millisecond, nil},
		{"server prefill", "request", "test-hop", "SPAN_KIND_INTERNAL", 30 * time.Millisecond, 12500 * time.Microsecond, nil},
		{"app guardrail", "request", "test-hop", "SPAN_KIND_INTERNAL", 42500 * time.Microsecond, time.Millisecond, true},
		{"hop request", "00f067aa0ba902b7", "test-hop", "SPAN_KIND_SERVER", 0, 50 * time.Millisecond, nil},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("spans (-want +got):\n%s", diff)
	}
	if tp := out.Get("Traceparent"); tp != "00-4bf92f3577b34da6a3ce929d0e0e4736-"+reqID+"-01" {
		t.Errorf("injected traceparent %q", tp)
	}
}

func TestValidateEndpoint(t *testing.T) {
	for _, ok := range []string{"http://localhost:4318", "https://c:4318/otlp/v1/traces"} {
		if err := tracing.ValidateEndpoint(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"localhost:4318", "ftp://x", "http://", "http://u:secret@%zz"} {
		err := tracing.ValidateEndpoint(bad)
		if err == nil {
			t.Errorf("%s accepted", bad)
		} else if bad == "http://u:secret@%zz" && strings.Contains(err.Error(), "secret") {
			t.Errorf("error quotes the password: %v", err)
		}
	}
}

// The OTLP-to-Prometheus translation of the GenAI metrics' names.
func TestPromName(t *testing.T) {
	for _, c := range []struct{ name, unit, want string }{
		{tracing.MetricServerTTFT, tracing.UnitSeconds, "gen_ai_server_time_to_first_token_seconds"},
		{tracing.MetricServerTPOT, tracing.UnitSeconds, "gen_ai_server_time_per_output_token_seconds"},
		{tracing.MetricServerDuration, tracing.UnitSeconds, "gen_ai_server_request_duration_seconds"},
		{tracing.MetricTokenUsage, tracing.UnitTokens, "gen_ai_client_token_usage"},
		{tracing.MetricClientTTFC, tracing.UnitSeconds, "gen_ai_client_operation_time_to_first_chunk_seconds"},
		{"x.size", "By", "x_size_By"},
	} {
		if got := tracing.PromName(c.name, c.unit); got != c.want {
			t.Errorf("tracing.PromName(%q, %q) = %q, want %q", c.name, c.unit, got, c.want)
		}
	}
	if got := tracing.PromLabel(tracing.AttrTokenType); got != "gen_ai_token_type" {
		t.Errorf("tracing.PromLabel = %q", got)
	}
	if b := tracing.GenAIBounds(tracing.MetricServerTTFT); len(b) != 16 || b[0] != 0.001 || tracing.GenAIBounds("other") != nil {
		t.Errorf("tracing.GenAIBounds: %v", b)
	}
}
