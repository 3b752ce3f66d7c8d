package serve

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokentrace/tokentrace/internal/engine"
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
