package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openaitest"
	"github.com/tokentrace/tokentrace/internal/sse"
)

// scriptedUpstream answers every completion with the given SSE body,
// written in one go.
func scriptedUpstream(t testing.TB, body string) string {
	t.Helper()
	return openaitest.Start(t, &openaitest.Upstream{Script: body}).URL()
}

const (
	roleChunk  = `data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n"
	stopChunk  = `data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n"
	usageChunk = `data: {"id":"x","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":0,"total_tokens":3}}` + "\n\n"
	textChunk  = `data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}` + "\n\n"
	doneEvent  = "data: [DONE]\n\n"
)

// TestStreamEdgeShapesEndWithOneDone: whatever the upstream's valid
// stream holds (no content at all, usage only, [DONE] alone), the client
// gets its events, one server-timing comment, and exactly one [DONE],
// last.
func TestStreamEdgeShapesEndWithOneDone(t *testing.T) {
	for _, c := range []struct{ name, body string }{
		{"role and stop, no content", roleChunk + stopChunk + doneEvent},
		{"usage only", roleChunk + stopChunk + usageChunk + doneEvent},
		{"[DONE] alone", doneEvent},
		{"CRLF line ends", strings.ReplaceAll(roleChunk+stopChunk+doneEvent, "\n", "\r\n")},
		{"content", roleChunk + textChunk + stopChunk + doneEvent},
	} {
		t.Run(c.name, func(t *testing.T) {
			gw := startGateway(t, quickGateway(t, scriptedUpstream(t, c.body)))
			resp := post(t, context.Background(), gw.URL, chatBody("m", true, "x", ""), nil)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			data, comments := sseEvents(t, strings.NewReader(string(b)))
			if n := strings.Count(string(b), "[DONE]"); n != 1 || len(data) == 0 || data[len(data)-1] != "[DONE]" {
				t.Errorf("%d [DONE]s, want one, last:\n%s", n, b)
			}
			if len(comments) != 1 || !strings.HasPrefix(comments[0], "server-timing ") {
				t.Errorf("comments %q, want one server-timing comment", comments)
			}
			if want := strings.Count(c.body, "data: {"); len(data)-1 != want {
				t.Errorf("%d events before [DONE], want the upstream's %d:\n%s", len(data)-1, want, b)
			}
			if resp.Trailer.Get("Server-Timing") == "" {
				t.Error("no Server-Timing trailer")
			}
		})
	}
}

// TestStreamWithOnlyAnErrorEvent: an upstream whose stream holds an error
// event before any content is answered as an error (the upstream's, with
// 502), not as a stream; no [DONE].
func TestStreamWithOnlyAnErrorEvent(t *testing.T) {
	body := roleChunk + `data: {"error":{"message":"model overloaded","type":"server_error","code":"overloaded"}}` + "\n\n" + doneEvent
	gw := startGateway(t, quickGateway(t, scriptedUpstream(t, body)))
	resp := post(t, context.Background(), gw.URL, chatBody("m", true, "x", ""), nil)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), "model overloaded") || strings.Contains(string(b), "[DONE]") {
		t.Fatalf("status %d body %s, want 502 with the upstream's error and no [DONE]", resp.StatusCode, b)
	}
}

// upstreamErrors reads tokentrace_gateway_upstream_errors_total.
func upstreamErrors(g *Gateway, pool, kind string) float64 {
	return testutil.ToFloat64(g.Metrics.UpstreamErrors.WithLabelValues(pool, kind))
}

// TestGarbageBeforeFirstTokenIs502: a 200 event stream whose events are
// not JSON is an upstream protocol error: the attempt fails (502
// upstream_protocol_error, counted), nothing of it reaches the client.
func TestGarbageBeforeFirstTokenIs502(t *testing.T) {
	for _, c := range []struct{ name, body string }{
		{"text", "data: hello world\n\n" + doneEvent},
		{"html", "data: <html><body>502 Bad Gateway</body></html>\n\n" + doneEvent},
		{"truncated JSON that looks like content", `data: {"choices":[{"delta":{"content":"hi"` + "\n\n" + doneEvent},
		{"a number", "data: 42\n\n" + doneEvent},
		{"empty data", "data:\n\n" + doneEvent},
		{"after a role chunk", roleChunk + "data: oops\n\n" + textChunk + doneEvent},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := quickGateway(t, scriptedUpstream(t, c.body))
			gw := startGateway(t, g)
			resp := post(t, context.Background(), gw.URL, chatBody("m", true, "x", ""), nil)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), `"code":"upstream_protocol_error"`) {
				t.Fatalf("status %d body %s, want 502 upstream_protocol_error", resp.StatusCode, b)
			}
			if strings.Contains(string(b), "[DONE]") {
				t.Errorf("the upstream's stream reached the client: %s", b)
			}
			if n := upstreamErrors(g, "default", "protocol_error"); n != 1 {
				t.Errorf("upstream_errors_total{kind=protocol_error} = %v, want 1", n)
			}
		})
	}
}

// TestGarbageRetriedOnAnotherReplica: a protocol error before the first
// token is retryable like a 5xx.
func TestGarbageRetriedOnAnotherReplica(t *testing.T) {
	bad := scriptedUpstream(t, "data: <html>\n\n"+doneEvent)
	good := scriptedUpstream(t, roleChunk+textChunk+doneEvent)
	g := mustGateway(t, "pools: [{name: p, balancer: round_robin, replicas: [{url: "+bad+"}, {url: "+good+"}]}]\n"+
		"routes: [{model: \"*\", pool: p, timeouts: {retries: 1}}]\n")
	gw := startGateway(t, g)
	for range 2 { // the round robin starts once on each
		resp := post(t, context.Background(), gw.URL, chatBody("m", true, "x", ""), nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"content":"hi"`) || strings.Contains(string(b), "<html>") {
			t.Fatalf("status %d body %s, want the good replica's answer", resp.StatusCode, b)
		}
	}
}

// TestGarbageMidStreamEndsWithErrorEvent: after the first token, an event
// that is not JSON ends the client's stream with an
// upstream_protocol_error event (no [DONE], the garbage not forwarded),
// counted as a 502 and a protocol error.
func TestGarbageMidStreamEndsWithErrorEvent(t *testing.T) {
	for _, garbage := range []string{"data: <html>oops</html>\n\n", "data: [1,2]\n\n", `data: {"choices":[{"delta":{"content":"cut` + "\n\n"} {
		g := quickGateway(t, scriptedUpstream(t, roleChunk+textChunk+garbage+textChunk+doneEvent))
		gw := startGateway(t, g)
		resp := post(t, context.Background(), gw.URL, chatBody("m", true, "x", ""), nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		data, _ := sseEvents(t, strings.NewReader(string(b)))
		if resp.StatusCode != 200 || len(data) != 3 || !strings.Contains(data[2], `"code":"upstream_protocol_error"`) {
			t.Fatalf("%q: status %d, events %q: want role, content, then an upstream_protocol_error event", garbage, resp.StatusCode, data)
		}
		if strings.Contains(string(b), "[DONE]") || strings.Contains(string(b), strings.TrimSpace(garbage)) {
			t.Errorf("%q: [DONE] or the garbage reached the client: %s", garbage, b)
		}
		if n := upstreamErrors(g, "default", "protocol_error"); n != 1 {
			t.Errorf("%q: upstream_errors_total{kind=protocol_error} = %v, want 1", garbage, n)
		}
		if n := testutil.ToFloat64(g.Metrics.Requests.WithLabelValues("default", "*", "502")); n != 1 {
			t.Errorf("%q: requests_total{code=502} = %v, want 1", garbage, n)
		}
	}
}

// TestLoneCRStream: an upstream that ends its lines with a lone CR (one
// of the three line ends SSE allows) is relayed event by event, as sent.
func TestLoneCRStream(t *testing.T) {
	body := strings.ReplaceAll(roleChunk+textChunk+textChunk+stopChunk+doneEvent, "\n", "\r")
	gw := startGateway(t, quickGateway(t, scriptedUpstream(t, body)))
	resp := post(t, context.Background(), gw.URL, chatBody("m", true, "x", ""), nil)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	rd := sse.NewReader(resp.Body, nil, 0)
	var data []string
	for {
		ev, err := rd.Next()
		if err != nil {
			break
		}
		data = append(data, string(ev.Data))
	}
	want := []string{strings.TrimSpace(roleChunk[6:]), strings.TrimSpace(textChunk[6:]), strings.TrimSpace(textChunk[6:]), strings.TrimSpace(stopChunk[6:]), "[DONE]"}
	if diff := cmp.Diff(want, data); diff != "" || rd.Comments != 1 {
		t.Errorf("events (-upstream +client), %d comments:\n%s", rd.Comments, diff)
	}
}

// TestEmptyStreamHasNoTTFT: a stream that ends without content has no
// first token, so it adds no TTFT sample (its [DONE] still ends
// upstream_ttft in the stages); a stream with content does.
func TestEmptyStreamHasNoTTFT(t *testing.T) {
	for _, c := range []struct {
		body string
		ttft uint64
	}{{roleChunk + stopChunk + usageChunk + doneEvent, 0}, {doneEvent, 0}, {roleChunk + textChunk + doneEvent, 1}} {
		g := quickGateway(t, scriptedUpstream(t, c.body))
		gw := startGateway(t, g)
		if s, _, b := do(t, gw.URL, chatBody("m", true, "x", ""), nil); s != 200 {
			t.Fatalf("status %d: %s", s, b)
		}
		var m, stage dto.Metric
		if err := g.Metrics.TTFT.WithLabelValues("default", "*").(prometheusMetric).Write(&m); err != nil {
			t.Fatal(err)
		}
		if err := g.Metrics.Stage[latency.TimingUpstreamTTFT].WithLabelValues("default", "*").(prometheusMetric).Write(&stage); err != nil {
			t.Fatal(err)
		}
		if n := m.GetHistogram().GetSampleCount(); n != c.ttft || stage.GetHistogram().GetSampleCount() != 1 {
			t.Errorf("%q: %d TTFT samples, want %d; %d upstream_ttft samples, want 1", c.body, n, c.ttft, stage.GetHistogram().GetSampleCount())
		}
	}
}

// TestNonJSONAnswerIs502: a 200 non-streaming answer that is not a JSON
// object is an upstream protocol error, as a stream's event would be: it
// is retried on another replica when retries allow, else answered 502
// upstream_protocol_error, counted, and never passed on.
func TestNonJSONAnswerIs502(t *testing.T) {
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, "<html><body>upstream maintenance page</body></html>")
	}))
	defer html.Close()
	g := quickGateway(t, html.URL)
	gw := startGateway(t, g)
	s, _, b := do(t, gw.URL, chatBody("m", false, "x", ""), nil)
	if s != http.StatusBadGateway || !strings.Contains(b, "upstream_protocol_error") || strings.Contains(b, "maintenance") {
		t.Fatalf("status %d body %s, want 502 upstream_protocol_error without the page", s, b)
	}
	if n := upstreamErrors(g, "default", "protocol_error"); n != 1 {
		t.Errorf("protocol errors counted %v, want 1", n)
	}
	good := openaitest.Start(t, &openaitest.Upstream{Name: "b"})
	g2 := mustGateway(t, fmt.Sprintf("pools: [{name: p, balancer: round_robin, replicas: [{url: %q}, {url: %q}]}]\nroutes: [{model: \"*\", pool: p, timeouts: {retries: 1}}]\n", html.URL, good.URL()))
	gw2 := startGateway(t, g2)
	for range 2 { // whichever replica round robin starts with
		if s, _, b := do(t, gw2.URL, chatBody("m", false, "x", ""), nil); s != 200 || !json.Valid([]byte(b)) {
			t.Fatalf("with a retry: status %d body %s, want the other replica's answer", s, b)
		}
	}
}
