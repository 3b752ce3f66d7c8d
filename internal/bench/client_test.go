package bench

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/openaitest"
	"github.com/tokentrace/tokentrace/internal/workload"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// tick is a fake clock that advances 1 µs per reading, so every instant in
// a record is distinct and ordered.
func tick() func() int64 {
	var t atomic.Int64
	return func() int64 { return t.Add(1000) }
}

func newTestClient(t *testing.T, url string, mod func(*Target)) *Client {
	t.Helper()
	tg := Target{BaseURL: url, Endpoint: EndpointChat, Model: "m", Stream: true, Timeout: 2 * time.Second}
	if mod != nil {
		mod(&tg)
	}
	c, err := NewClient(tg, tick(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

var testReq = workload.Request{Messages: nil, Prompt: "hello there", InputTokens: 3, MaxTokens: 4}

func do(t *testing.T, c *Client) *latency.Record {
	t.Helper()
	rec := &latency.Record{ID: "r-1"}
	req := testReq
	c.Do(context.Background(), &req, rec)
	return rec
}

// sseServer streams the given raw body, flushing after each part.
func sseServer(t *testing.T, parts []string, trailer string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		if trailer != "" {
			w.Header().Set("Trailer", "Server-Timing")
		}
		w.Header().Set("X-Request-Id", r.Header.Get("X-Request-Id"))
		for _, p := range parts {
			_, _ = io.WriteString(w, p)
			w.(http.Flusher).Flush()
			time.Sleep(3 * time.Millisecond) // separate reads on the client
		}
		if trailer != "" {
			w.Header().Set("Server-Timing", trailer)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestStreamMeasuresContentTokensOnly(t *testing.T) {
	parts := []string{
		`data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n",
		`data: {"choices":[{"index":0,"delta":{"reasoning_content":"hmm"}}]}` + "\n\n",
		`data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}` + "\n\n",
		`data: {"choices":[{"index":0,"delta":{"content":"lo"}}]}` + "\n\n" +
			`data: {"choices":[{"index":0,"delta":{"content":"!"},"finish_reason":"length"}]}` + "\n\n",
		`data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":2}}}` + "\n\n",
		"data: [DONE]\n\n",
	}
	srv := sseServer(t, parts, "frontend;dur=0.5, queue;dur=1.5, prefill;dur=20, decode;dur=30.25")
	rec := do(t, newTestClient(t, srv.URL, nil))
	if !rec.OK() {
		t.Fatalf("failed: %s %s", rec.ErrorKind, rec.Error)
	}
	if rec.FirstReasonNS == 0 || rec.FirstTokenNS <= rec.FirstReasonNS {
		t.Errorf("first reasoning %d, first token %d: reasoning must come first and not count as the first token", rec.FirstReasonNS, rec.FirstTokenNS)
	}
	if rec.FirstTokenNS != rec.ChunkNS[0] || len(rec.ChunkNS) != 3 || len(rec.OtherNS) != 2 {
		t.Errorf("chunks %v other %v", rec.ChunkNS, rec.OtherNS)
	}
	// The last two content events arrived in one read: one instant.
	if rec.ChunkNS[1] != rec.ChunkNS[2] {
		t.Errorf("coalesced events stamped %d and %d; want the same arrival", rec.ChunkNS[1], rec.ChunkNS[2])
	}
	got := []any{rec.InputTokens, rec.InputSource, rec.OutputTokens, rec.OutputSource, rec.CachedTokens, rec.ReasoningTokens, rec.FinishReason, rec.Status}
	want := []any{5, latency.SourceUsage, 4, latency.SourceUsage, 2, 1, "length", 200}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	wantSplit := &latency.ServerSplit{QueueNS: 1500000, PrefillNS: 20000000, DecodeNS: 30250000, Source: "server-timing"}
	if diff := cmp.Diff(wantSplit, rec.Server); diff != "" {
		t.Errorf("server split (-want +got):\n%s", diff)
	}
	if !(rec.SentNS < rec.WroteNS && rec.WroteNS < rec.FirstByteNS && rec.FirstByteNS <= rec.ChunkNS[0] && rec.ChunkNS[2] < rec.EndNS) {
		t.Errorf("instants out of order: %+v", rec)
	}
	if rec.LastEventNS == 0 || rec.LastEventNS >= rec.EndNS || len(rec.TraceID) != 32 {
		t.Errorf("last event %d end %d trace id %q", rec.LastEventNS, rec.EndNS, rec.TraceID)
	}
}

func TestContinuousUsageGivesPerChunkTokens(t *testing.T) {
	u := func(n int) string {
		return `,"usage":{"prompt_tokens":7,"completion_tokens":` + string(rune('0'+n)) + `}`
	}
	parts := []string{
		`data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]` + u(0) + "}\n\n",
		`data: {"choices":[{"index":0,"delta":{"content":"ab"}}]` + u(2) + "}\n\n",
		`data: {"choices":[{"index":0,"delta":{"content":"c"}}]` + u(3) + "}\n\n",
		`data: {"choices":[{"index":0,"delta":{"content":"def"}}]` + u(6) + "}\n\n",
		"data: [DONE]\n\n",
	}
	rec := do(t, newTestClient(t, sseServer(t, parts, "").URL, func(tg *Target) { tg.ContinuousUsage = true }))
	if !rec.OK() {
		t.Fatal(rec.Error)
	}
	if diff := cmp.Diff([]int32{2, 1, 3}, rec.ChunkTokens); diff != "" {
		t.Errorf("chunk tokens (-want +got):\n%s", diff)
	}
	if rec.OutputTokens != 6 || rec.OutputSource != latency.SourceContinuousUsage || rec.InputTokens != 7 {
		t.Errorf("output %d from %s, input %d", rec.OutputTokens, rec.OutputSource, rec.InputTokens)
	}
	if n := len(rec.ITLs(nil)); n != 5 {
		t.Errorf("%d ITLs, want N-1 = 5", n)
	}
}

func TestCompletionsWithoutUsageCountsChunks(t *testing.T) {
	parts := []string{
		`data: {"choices":[{"index":0,"text":"a"}]}` + "\n\n",
		`data: {"choices":[{"index":0,"text":"b"}]}` + "\n\n",
		"data: [DONE]\n\n",
	}
	rec := do(t, newTestClient(t, sseServer(t, parts, "").URL, func(tg *Target) { tg.Endpoint = EndpointCompletions }))
	if !rec.OK() || rec.OutputTokens != 2 || rec.OutputSource != latency.SourceChunks || rec.InputSource != latency.SourceRequest || rec.ChunkTokens != nil {
		t.Errorf("%+v", rec)
	}
}

func TestRequestBody(t *testing.T) {
	var body string
	var hdr http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		body, hdr = string(b), r.Header.Clone()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"index":0,"message":{"role":"assistant","content":"hi there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2},"metrics":{"queue_time_ms":1,"prefill_time_ms":2,"generation_time_ms":3}}`)
	}))
	defer srv.Close()
	c := newTestClient(t, srv.URL+"/v1/", func(tg *Target) {
		tg.Stream, tg.IgnoreEOS, tg.MinTokens, tg.APIKey = false, true, true, "sk-x"
		tg.Headers = http.Header{"X-Extra": {"1"}}
	})
	rec := do(t, c)
	want := `{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":4,"min_tokens":4,"ignore_eos":true}`
	if body != want {
		t.Errorf("body\n got %s\nwant %s", body, want)
	}
	if hdr.Get("Authorization") != "Bearer sk-x" || hdr.Get("X-Extra") != "1" || hdr.Get("X-Request-Id") != "r-1" ||
		!strings.HasPrefix(hdr.Get("Traceparent"), "00-"+rec.TraceID+"-") {
		t.Errorf("headers %v", hdr)
	}
	if !rec.OK() || rec.OutputTokens != 2 || rec.FirstTokenNS != rec.EndNS || len(rec.ChunkNS) != 1 || rec.ChunkTokens[0] != 2 {
		t.Errorf("non-streaming record %+v", rec)
	}
	if rec.Server == nil || rec.Server.PrefillNS != 2e6 || rec.Server.Source != "vllm-metrics" {
		t.Errorf("server split %+v", rec.Server)
	}
}

func TestFaultsAreRecordedNotFatal(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()
	status := func(code int, retry string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			openai.WriteError(w, code, openai.NewError(openai.TypeServer, "nope "+retry, "", ""), 0)
		}))
	}
	hijack := func(write string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			conn, buf, _ := http.NewResponseController(w).Hijack()
			_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
			_, _ = buf.WriteString(write)
			_ = buf.Flush()
			if tc, ok := conn.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // RST, not FIN
			}
			_ = conn.Close()
		}))
	}
	chunk := func(s string) string { return hexLen(s) + "\r\n" + s + "\r\n" }
	silent := openaitest.Start(t, &openaitest.Upstream{Script: `data: {"choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n", Hold: true})
	tests := []struct {
		name string
		url  string
		kind latency.ErrorKind
		text string
	}{
		{"unreachable", closedURL, latency.FailConnect, "refused"},
		{"401", status(401, "").URL, latency.FailHTTP4xx, "401 Unauthorized: server_error: nope"},
		{"404", status(404, "").URL, latency.FailHTTP4xx, "404"},
		{"429", status(429, "").URL, latency.FailRateLimited, "429"},
		{"503", status(503, "").URL, latency.FailHTTP5xx, "503"},
		{"no [DONE]", sseServer(t, []string{`data: {"choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n"}, "").URL, latency.FailStreamCut, "without [DONE]"},
		{"invalid JSON", sseServer(t, []string{"data: {\"choices\": [oops\n\n", "data: [DONE]\n\n"}, "").URL, latency.FailInvalidEvent, "not valid JSON"},
		{"error in stream", sseServer(t, []string{`data: {"error":{"message":"boom","type":"server_error"}}` + "\n\n"}, "").URL, latency.FailServer, "boom"},
		{"reset mid-stream", hijack(chunk(`data: {"choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n")).URL, latency.FailReset, ""},
		{"silence", silent.URL(), latency.FailTimeout, "no bytes for 300ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestClient(t, tt.url, func(tg *Target) { tg.Timeout = 300 * time.Millisecond })
			rec := do(t, c)
			if rec.ErrorKind != tt.kind || !strings.Contains(rec.Error, tt.text) {
				t.Errorf("kind %q error %q; want %q containing %q", rec.ErrorKind, rec.Error, tt.kind, tt.text)
			}
		})
	}
}

func hexLen(s string) string {
	const digits = "0123456789abcdef"
	n := len(s)
	if n == 0 {
		return "0"
	}
	var b []byte
	for n > 0 {
		b = append([]byte{digits[n%16]}, b...)
		n /= 16
	}
	return string(b)
}

func TestBadTargets(t *testing.T) {
	for _, tg := range []Target{
		{BaseURL: "localhost:8000", Endpoint: EndpointChat},
		{BaseURL: "ftp://x", Endpoint: EndpointChat},
		{BaseURL: "http://x", Endpoint: "embeddings"},
	} {
		if _, err := NewClient(tg, tick(), 0); err == nil {
			t.Errorf("%+v accepted", tg)
		}
	}
	for base, want := range map[string]string{
		"http://h:1":        "http://h:1/v1/chat/completions",
		"http://h:1/v1":     "http://h:1/v1/chat/completions",
		"https://h/api/v1/": "https://h/api/v1/chat/completions",
	} {
		c, err := NewClient(Target{BaseURL: base, Endpoint: EndpointChat}, tick(), 0)
		if err != nil || c.URL() != want {
			t.Errorf("%s: %v %v, want %s", base, c.URL(), err, want)
		}
	}
}

func TestServerTimingThroughGateway(t *testing.T) {
	rec := &latency.Record{}
	serverTiming(rec, latency.TimingValues{Header: []string{"gateway_in;dur=0.2, queue;dur=5, connect;dur=0.3"},
		Trailer: []string{"decode;dur=40, post_process;dur=0.1, backpressure;dur=0, server_queue;dur=2, prefill;dur=10, network;dur=1, total;dur=60"}})
	want := &latency.ServerSplit{QueueNS: 2e6, PrefillNS: 10e6, DecodeNS: 40e6, Source: "server-timing"}
	if diff := cmp.Diff(want, rec.Server); diff != "" || rec.GatewayNS != 5600000 {
		t.Errorf("gateway %d, split (-want +got):\n%s", rec.GatewayNS, diff)
	}
	rec = &latency.Record{}
	metricsSplit(rec, []byte(`{"arrival_time":100.0,"time_in_queue":0.5,"first_scheduled_time":100.5,"first_token_time":100.75,"last_token_time":101.0}`))
	want = &latency.ServerSplit{QueueNS: 5e8, PrefillNS: 25e7, DecodeNS: 25e7, Source: "vllm-metrics", Engine: "vllm", FirstScheduledUnixNS: 100_500_000_000}
	if diff := cmp.Diff(want, rec.Server); diff != "" {
		t.Errorf("vLLM metrics (-want +got):\n%s", diff)
	}
	// tokentrace's metrics object: arrival_time + frontend + queue is the
	// first scheduled instant; the Server-Timing trailer read after it
	// replaces the durations and keeps the instant.
	rec = &latency.Record{}
	metricsSplit(rec, []byte(`{"arrival_time":1764750000.25,"frontend_time_ms":0.125,"queue_time_ms":2.5,"prefill_time_ms":10,"generation_time_ms":40}`))
	serverTiming(rec, latency.TimingValues{Trailer: []string{"frontend;dur=0.125, server_queue;dur=2.500, prefill;dur=10.000, server_decode;dur=40.000"}})
	// The engine the metrics object named is kept: Server-Timing does
	// not say it.
	want = &latency.ServerSplit{QueueNS: 2.5e6, PrefillNS: 10e6, DecodeNS: 40e6, Source: "server-timing", Engine: "tokentrace",
		FirstScheduledUnixNS: 1764750000_252_625_000}
	if diff := cmp.Diff(want, rec.Server); diff != "" {
		t.Errorf("tokentrace metrics, then Server-Timing (-want +got):\n%s", diff)
	}
	// llama.cpp behind a tokentrace gateway: the stream's last chunk
	// holds llama.cpp's timings, passed on; the gateway's Server-Timing
	// holds their split, without the queue wait llama.cpp does not
	// report — which stays unreported, not 0.
	rec = &latency.Record{Server: latency.SplitFromLlamaCppTimings([]byte(`{"prompt_n":34,"prompt_ms":6.25,"predicted_n":2,"predicted_ms":2.5}`))}
	serverTiming(rec, latency.TimingValues{Header: []string{"gateway_in;dur=0.2, gateway_queue;dur=0, connect;dur=0.3, upstream_ttft;dur=30"},
		Trailer: []string{"decode;dur=3, post_process;dur=0.1, backpressure;dur=0, prefill;dur=6.250, total;dur=33.6"}})
	want = &latency.ServerSplit{PrefillNS: 6.25e6, DecodeNS: 3e6, Source: "server-timing", Engine: "llamacpp", Unreported: []string{"queue"}}
	if diff := cmp.Diff(want, rec.Server); diff != "" {
		t.Errorf("llama.cpp behind a gateway (-want +got):\n%s", diff)
	}
}

type endlessReader struct{}

func (endlessReader) Read(p []byte) (int, error) { return len(p), nil }

// BenchmarkSilenceWatch is what the silence timeout costs a body read that
// brings bytes, with 500 requests in flight per processor reading in turn
// (docs/performance.md).
func BenchmarkSilenceWatch(b *testing.B) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		rs := make([]io.Reader, 500)
		ws := make([]*silenceWatch, len(rs))
		defer func() {
			for _, w := range ws {
				w.stop()
			}
		}()
		for i := range rs {
			ws[i] = newSilenceWatch(time.Minute, func() {})
			rs[i] = ws[i].body(endlessReader{})
		}
		var buf [64]byte
		i := 0
		for pb.Next() {
			_, _ = rs[i].Read(buf[:])
			if i++; i == len(rs) {
				i = 0
			}
		}
	})
}

// TestSilenceWatch checks the watch's decision when its timer fires: a
// byte within the timeout re-arms it, none cancels, and a stopped watch
// does nothing.
func TestSilenceWatch(t *testing.T) {
	var canceled atomic.Int32
	w := newSilenceWatch(time.Hour, func() { canceled.Add(1) })
	defer w.stop()
	w.d = 50 * time.Millisecond
	w.start = time.Now().Add(-time.Second) // the request was sent 1 s ago
	_, _ = w.body(endlessReader{}).Read(make([]byte, 8))
	w.fire() // a byte came just now
	if canceled.Load() != 0 {
		t.Fatal("canceled although a byte came within the timeout")
	}
	w.last.Store(int64(900 * time.Millisecond)) // the last byte came 100 ms ago
	w.fire()
	if canceled.Load() != 1 {
		t.Fatal("not canceled after 100 ms of silence with a 50 ms timeout")
	}
	w.stop()
	w.fire()
	if canceled.Load() != 1 {
		t.Fatal("a stopped watch canceled")
	}
}

// Every hop's stages are read from the header, the final SSE comment and
// the trailer; bad entries are noted, never counted.
func TestStagesFromHeaderFinalEventAndTrailer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Trailer", "Server-Timing")
		w.Header().Add("Server-Timing", "app.in;dur=0.5, app.retrieval;dur=2")
		w.Header().Add("Server-Timing", "app.rerank;dur=oops")
		_, _ = io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}`+"\n\n")
		_, _ = io.WriteString(w, ": ping\n: server-timing app.upstream;dur=3, app.total;dur=6, server_queue;dur=1\ndata: [DONE]\n\n")
		w.Header().Set("Server-Timing", "app.upstream;dur=3, app.total;dur=6, server_queue;dur=1, prefill;dur=1.5")
	}))
	t.Cleanup(srv.Close)
	rec := do(t, newTestClient(t, srv.URL, nil))
	if !rec.OK() {
		t.Fatalf("failed: %s %s", rec.ErrorKind, rec.Error)
	}
	want := []latency.HopStage{{Hop: latency.HopApp, Name: "in", NS: 5e5}, {Hop: latency.HopApp, Name: "retrieval", NS: 2e6},
		{Hop: latency.HopApp, Name: "upstream", NS: 3e6}, {Hop: latency.HopApp, Name: "total", NS: 6e6},
		{Hop: latency.HopServer, Name: "server_queue", NS: 1e6}, {Hop: latency.HopServer, Name: "prefill", NS: 15e5}}
	if diff := cmp.Diff(want, rec.Timing); diff != "" {
		t.Errorf("stages (-want +got):\n%s", diff)
	}
	if len(rec.TimingNotes) == 0 || !strings.Contains(rec.TimingNotes[0], "app.rerank;dur=oops: dur is not a number") {
		t.Errorf("notes %q", rec.TimingNotes)
	}
	if rec.MaxTokens != testReq.MaxTokens || rec.Schema != latency.RecordSchema {
		t.Errorf("max_tokens %d, schema %d", rec.MaxTokens, rec.Schema)
	}
}

// With a tracer, each request is a client span whose context the server
// receives as traceparent, lasting from the send to the end of the answer.
func TestClientSpan(t *testing.T) {
	up := openaitest.Start(t, &openaitest.Upstream{Script: `data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}` + "\n\ndata: [DONE]\n\n"})
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	c := newTestClient(t, up.URL(), nil)
	epoch := time.Unix(1700000000, 0)
	c.Trace(tp.Tracer("test"), epoch)
	rec := do(t, c)
	if !rec.OK() {
		t.Fatalf("failed: %s %s", rec.ErrorKind, rec.Error)
	}
	var client sdktrace.ReadOnlySpan
	var names []string
	for _, s := range exp.GetSpans().Snapshots() {
		names = append(names, s.Name())
		if s.SpanKind() == trace.SpanKindClient {
			client = s
		}
	}
	if client == nil {
		t.Fatalf("no client span among %v", names)
	}
	sc := client.SpanContext()
	got := up.Headers()[0].Get("Traceparent")
	if want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"; got != want || rec.TraceID != sc.TraceID().String() {
		t.Errorf("server got traceparent %v, record trace %s; want %s", got, rec.TraceID, want)
	}
	if !client.EndTime().Equal(epoch.Add(time.Duration(rec.EndNS))) || client.StartTime().After(epoch.Add(time.Duration(rec.SentNS))) {
		t.Errorf("span %v – %v, record sent %d end %d", client.StartTime(), client.EndTime(), rec.SentNS, rec.EndNS)
	}
	// The request span is the GenAI conventions' inference span, "chat MODEL".
	if strings.Join(names, ",") != "client connect,client send,chat m" {
		t.Errorf("spans %v", names)
	}
}

// Bad Server-Timing input — malformed, duplicated, claiming more time than
// the request took — is noted on the record and never corrupts the split:
// the decomposition still sums exactly to E2E, with the impossible claim
// set aside.
func TestBadServerTimingIsNotedNeverCounted(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header []string
		note   string
	}{
		{"malformed", []string{`server_queue;dur=1, prefill;dur=x, "oops", server_decode;dur=2`}, "malformed entry"},
		{"duplicated", []string{"server_queue;dur=1, prefill;dur=2", "server_queue;dur=1, prefill;dur=2"}, "reported twice"},
		{"more than the request took", []string{"server_queue;dur=1, prefill;dur=2, server_decode;dur=600000"}, "more than the"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := openaitest.Start(t, &openaitest.Upstream{Header: http.Header{"Server-Timing": tc.header},
				Script: `data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}` + "\n\ndata: [DONE]\n\n"})
			c, err := NewClient(Target{BaseURL: up.URL(), Endpoint: EndpointChat, Model: "m", Stream: true, Timeout: 2 * time.Second}, realNow(), 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			rec := do(t, c)
			if !rec.OK() {
				t.Fatalf("failed: %s %s", rec.ErrorKind, rec.Error)
			}
			if !strings.Contains(strings.Join(rec.TimingNotes, "\n"), tc.note) {
				t.Errorf("notes %q, want one saying %q", rec.TimingNotes, tc.note)
			}
			p, ok := rec.Path()
			if !ok || p.Sum() != rec.EndNS-rec.IntendedNS {
				t.Errorf("parts %v sum to %d, want %d", p.Parts, p.Sum(), rec.EndNS-rec.IntendedNS)
			}
			for _, part := range p.Parts {
				if part.NS > rec.EndNS-rec.IntendedNS {
					t.Errorf("part %+v longer than the request", part)
				}
			}

		})
	}
}

// realNow is the run clock bench uses: nanoseconds since now.
func realNow() func() int64 {
	start := time.Now()
	return func() int64 { return int64(time.Since(start)) }
}

// TestRedirectIsNotFollowed: a server that answers 307 is not followed:
// the request fails with the 3xx status and nothing reaches the target
// (no prompt, no API key).
func TestRedirectIsNotFollowed(t *testing.T) {
	var hits atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer target.Close()
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redirect.Close()
	rec := do(t, newTestClient(t, redirect.URL, nil))
	if rec.Status != http.StatusTemporaryRedirect || rec.Error == "" {
		t.Errorf("status %d error %q, want the 307 as a failure", rec.Status, rec.Error)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the redirect target got %d requests, want none", n)
	}
}

func BenchmarkAppendBody(b *testing.B) {
	c, err := NewClient(Target{BaseURL: "http://unused", Endpoint: EndpointChat, Model: "m", Stream: true,
		ContinuousUsage: true, IgnoreEOS: true, MinTokens: true, MetricsField: fieldIncludeMetrics}, func() int64 { return 1 }, 0)
	if err != nil {
		b.Fatal(err)
	}
	req := &workload.Request{Prompt: strings.Repeat("word ", 512), MaxTokens: 64}
	buf := make([]byte, 0, 8<<10)
	b.ReportAllocs()
	for b.Loop() {
		buf = c.appendBody(buf[:0], req)
	}
}
