// Package otlptest is an OTLP/HTTP trace receiver for tests: an httptest
// server that decodes what exporters post to /v1/traces (protobuf, as
// OpenTelemetry's otlptracehttp sends it, optionally gzipped) and keeps the
// spans, so a test can check a trace's parentage and durations the way a
// collector would receive them.
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
	srv   *httptest.Server
	mu    sync.Mutex
	spans []Span
	bad   []string
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
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
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
	var msg coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &msg); err != nil {
		r.fail(w, "protobuf: "+err.Error())
		return
	}
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
				for _, kv := range sp.GetAttributes() {
					switch v := kv.GetValue().GetValue().(type) {
					case *common.AnyValue_StringValue:
						s.Attrs[kv.GetKey()] = v.StringValue
					case *common.AnyValue_IntValue:
						s.Attrs[kv.GetKey()] = v.IntValue
					case *common.AnyValue_DoubleValue:
						s.Attrs[kv.GetKey()] = v.DoubleValue
					case *common.AnyValue_BoolValue:
						s.Attrs[kv.GetKey()] = v.BoolValue
					}
				}
				got = append(got, s)
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
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
