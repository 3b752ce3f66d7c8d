// Package otlptest is an OTLP/HTTP trace receiver for tests: an httptest
// server that decodes what exporters post to /v1/traces (protobuf, as
// OpenTelemetry's otlptracehttp sends it, optionally gzipped) and keeps the
// spans, so a test can check a trace's parentage and durations the way a
// collector would receive them.
//
// It imports nothing of this module.
package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	colmetric "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	common "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened.
type Span struct {
	TraceID, SpanID, ParentID string // hex; ParentID empty for a root
	Name, Service             string
	Kind                      string // SPAN_KIND_SERVER, SPAN_KIND_CLIENT, SPAN_KIND_INTERNAL, …
	Start, End                time.Time
	// Attrs holds string, int64, float64 and bool attribute values.
	Attrs map[string]any
}

// Duration is End − Start.
func (s Span) Duration() time.Duration { return s.End.Sub(s.Start) }

// Receiver collects the spans posted to it.
type Receiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	spans  []Span
	points []Point
	bad    []string
}

// NewReceiver starts a receiver on a loopback port, closed at the test's end.
func NewReceiver(t testing.TB) *Receiver {
	r := &Receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

// URL is the endpoint to give an exporter (http://127.0.0.1:PORT).
func (r *Receiver) URL() string { return r.srv.URL }

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || (req.URL.Path != "/v1/traces" && req.URL.Path != "/v1/metrics") {
		r.fail(w, "unexpected "+req.Method+" "+req.URL.Path)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			r.fail(w, "gzip: "+err.Error())
			return
		}
		body = zr
	}
	b, err := io.ReadAll(io.LimitReader(body, 64<<20))
	if err != nil {
		r.fail(w, "read: "+err.Error())
		return
	}
	if req.URL.Path == "/v1/metrics" {
		r.metrics(w, b)
		return
	}
	var msg coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &msg); err != nil {
		r.fail(w, "protobuf: "+err.Error())
		return
	}
	got := decodeSpans(&msg)
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

func decodeSpans(msg *coltrace.ExportTraceServiceRequest) []Span {
	var got []Span
	for _, rs := range msg.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				s := Span{TraceID: hex.EncodeToString(sp.GetTraceId()), SpanID: hex.EncodeToString(sp.GetSpanId()),
					ParentID: hex.EncodeToString(sp.GetParentSpanId()), Name: sp.GetName(), Service: service,
					Kind:  sp.GetKind().String(),
					Start: time.Unix(0, int64(sp.GetStartTimeUnixNano())), End: time.Unix(0, int64(sp.GetEndTimeUnixNano())),
					Attrs: map[string]any{}}
				addAttrs(s.Attrs, sp.GetAttributes())
				got = append(got, s)
			}
		}
	}
	return got
}

func addAttrs(dst map[string]any, kvs []*common.KeyValue) {
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *common.AnyValue_StringValue:
			dst[kv.GetKey()] = v.StringValue
		case *common.AnyValue_IntValue:
			dst[kv.GetKey()] = v.IntValue
		case *common.AnyValue_DoubleValue:
			dst[kv.GetKey()] = v.DoubleValue
		case *common.AnyValue_BoolValue:
			dst[kv.GetKey()] = v.BoolValue
		}
	}
}

// Point is one histogram data point of a received metric, flattened.
type Point struct {
	Metric, Unit, Service string
	Count                 uint64
	Sum                   float64
	Bounds                []float64
	Attrs                 map[string]any
}

// metrics decodes one OTLP metrics export and keeps its histogram points.
func (r *Receiver) metrics(w http.ResponseWriter, b []byte) {
	var msg colmetric.ExportMetricsServiceRequest
	if err := proto.Unmarshal(b, &msg); err != nil {
		r.fail(w, "protobuf: "+err.Error())
		return
	}
	var got []Point
	for _, rm := range msg.GetResourceMetrics() {
		service := ""
		for _, kv := range rm.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				for _, dp := range m.GetHistogram().GetDataPoints() {
					p := Point{Metric: m.GetName(), Unit: m.GetUnit(), Service: service, Count: dp.GetCount(),
						Sum: dp.GetSum(), Bounds: dp.GetExplicitBounds(), Attrs: map[string]any{}}
					addAttrs(p.Attrs, dp.GetAttributes())
					got = append(got, p)
				}
			}
		}
	}
	r.mu.Lock()
	r.points = append(r.points, got...)
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&colmetric.ExportMetricsServiceResponse{})
	_, _ = w.Write(out)
}

// Points returns the histogram points received so far (every export's:
// cumulative temporality repeats a point in each), and the reasons of any
// post it could not decode.
func (r *Receiver) Points() ([]Point, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Point(nil), r.points...), append([]string(nil), r.bad...)
}

func (r *Receiver) fail(w http.ResponseWriter, why string) {
	r.mu.Lock()
	r.bad = append(r.bad, why)
	r.mu.Unlock()
	http.Error(w, why, http.StatusBadRequest)
}

// Spans returns the spans received so far, and the reasons of any post it
// could not decode.
func (r *Receiver) Spans() ([]Span, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...), append([]string(nil), r.bad...)
}
