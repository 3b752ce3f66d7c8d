package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/gateway/gatewaytest"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openaitest"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/scrape"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// runSlots runs a closed loop of workers against a slot stand-in.
func runSlots(t *testing.T, e *openaitest.SlotEngine, workers, requests int, mode string) (*Result, string) {
	t.Helper()
	return runURL(t, e.URL(), workers, requests, mode)
}

// runURL runs a closed loop of workers against the server at url.
func runURL(t *testing.T, url string, workers, requests int, mode string) (*Result, string) {
	t.Helper()
	return runEndpoint(t, url, EndpointChat, true, workers, requests, mode)
}

// runEndpoint runs a closed loop of workers against the server at url,
// speaking its API endpoint, streamed or not.
func runEndpoint(t *testing.T, url, endpoint string, stream bool, workers, requests int, mode string) (*Result, string) {
	t.Helper()
	var out bytes.Buffer
	cfg := Config{
		Target: Target{BaseURL: url, Endpoint: endpoint, Model: "stand-in", Stream: stream, ServerMetrics: mode,
			Timeout: time.Minute},
		Workload: &workload.Synthetic{Chat: true, Input: workload.Fixed(16), Output: workload.Fixed(8), Turns: 1, Seed: 1},
		Load:     workload.Load{Concurrency: workers, Requests: requests},
		OutDir:   filepath.Join(t.TempDir(), "run"), SkipCalibration: true, PromptTokenizer: PromptTokenizerBuiltin,
		ScrapeInterval: 50 * time.Millisecond,
	}
	res, err := Run(context.Background(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	return res, out.String()
}

func finding(rep *report.Report, rule string) *report.Finding {
	for i := range rep.Findings {
		if rep.Findings[i].Rule == rule {
			return &rep.Findings[i]
		}
	}
	return nil
}

// TestVLLMPerRequestMetricsAsked: against a stand-in that answers as
// vLLM's merged per-request metrics do (2 slots; 6 closed-loop workers),
// bench detects vLLM, asks every request with include_metrics, records
// each request's queue wait as the server measured it, and the report
// names slot queueing from that split.
func TestVLLMPerRequestMetricsAsked(t *testing.T) {
	e := openaitest.StartSlots(t, &openaitest.SlotEngine{Dialect: openaitest.DialectVLLM, Slots: 2,
		Prefill: 8 * time.Millisecond, PerToken: time.Millisecond, Tokens: 8, Evidence: true, Metrics: true})
	res, text := runSlots(t, e, 6, 120, "")
	ask := res.Summary.Evidence
	if ask == nil || ask.Engine != latency.EngineVLLM || ask.Field != "include_metrics" || ask.Requests != 120 {
		t.Fatalf("evidence asked %+v", ask)
	}
	if !strings.Contains(text, `asked "include_metrics" on 120 requests`) || !strings.Contains(text, "vllm-metrics (vllm) on 120") {
		t.Errorf("the summary does not say what was asked and what came back:\n%s", text)
	}
	log := e.Log()
	if len(log) != 120 {
		t.Fatalf("the stand-in answered %d requests, want 120", len(log))
	}
	server := map[string]openaitest.SlotRequest{}
	for _, rq := range log {
		if !rq.Asked {
			t.Errorf("request %s did not ask for the metrics object", rq.ID)
		}
		server[rq.ID] = rq
	}
	recs := readRecords(t, filepath.Join(res.OutDir, "requests.jsonl"))
	var waited int
	for _, rec := range recs {
		rq, ok := server[rec.ID]
		if !ok || rec.Server == nil || rec.Server.Source != latency.SourceVLLMMetrics || rec.Server.Engine != latency.EngineVLLM {
			t.Fatalf("record %s: split %+v, logged %v", rec.ID, rec.Server, ok)
		}
		if d := rec.Server.QueueNS - int64(rq.Queue); d > 2e6 || d < -2e6 {
			t.Errorf("record %s: queue %v, the server's %v", rec.ID, time.Duration(rec.Server.QueueNS), rq.Queue)
		}
		if rq.Queue > 2*time.Millisecond {
			waited++
		}
	}
	if waited < 60 {
		t.Errorf("only %d of 120 requests waited over 2 ms for a slot: the stand-in did not queue", waited)
	}
	f := finding(res.Report, "server-queueing")
	if f == nil {
		t.Fatalf("no server-queueing finding: %+v", res.Report.Findings)
	}
	if !strings.Contains(f.Evidence, "Server queueing is the largest TTFT term") || f.Numbers["server_waiting_peak"] < 1 {
		t.Errorf("finding %+v: want the split's queue share and the server's waiting gauge quoted", f)
	}
}

// TestDiagnosisWithoutASplit is the known-answer diagnosis of each engine
// whose answers carry no per-request split, against stand-ins that answer
// in that engine's shapes (openaitest.SlotEngine): 6 closed-loop workers
// on fewer slots are named as queueing from the gauges alone (vLLM not
// asked, and vLLM asked on every request by a server that returns no
// object — one started without --enable-per-request-metrics —, SGLang,
// TGI), from the run's shape alone (Ollama's OpenAI
// endpoint, no /metrics: 4 workers on one slot are named as served one at
// a time),
// and not named when the slots are enough. The run's shape takes a
// request's service time from the least TTFT, which holds the client's
// and the loopback's time too: on one slot the stand-in serves 4 times
// slower, so that what a loaded machine adds there (≈ 35 ms seen) stays
// well inside the margin between 1 and the 1.5 served at once that
// separates one at a time from more.
func TestDiagnosisWithoutASplit(t *testing.T) {
	for _, c := range []struct {
		dialect, mode  string
		slots, workers int
		says, title    string // "" title: no queueing finding
		slow           time.Duration
	}{
		{openaitest.DialectVLLM, ServerMetricsOff, 2, 6, "its own gauges (vllm's /metrics", "TTFT is dominated by waiting in the server's queue", 1},
		{openaitest.DialectVLLM, "", 2, 6, "its own gauges (vllm's /metrics", "TTFT is dominated by waiting in the server's queue", 1},
		{openaitest.DialectSGLang, "", 2, 6, "its limit max_running_requests is 2", "TTFT is dominated by waiting in the server's queue", 1},
		{openaitest.DialectTGI, "", 2, 6, "its own gauges (tgi's /metrics", "TTFT is dominated by waiting in the server's queue", 1},
		{openaitest.DialectOllama, "", 1, 4, "The server serves one request at a time", "Requests are served one at a time: the rest wait in a queue", 4},
		{openaitest.DialectOllama, "", 2, 6, "were served at once and", "TTFT is dominated by waiting in the server's queue", 1},
		{openaitest.DialectOllama, "", 6, 6, "", "", 1},
		{openaitest.DialectSGLang, "", 6, 6, "", "", 1},
	} {
		t.Run(fmt.Sprintf("%s %d slots", c.dialect, c.slots), func(t *testing.T) {
			e := openaitest.StartSlots(t, &openaitest.SlotEngine{Dialect: c.dialect, Slots: c.slots,
				Prefill: c.slow * 20 * time.Millisecond, PerToken: c.slow * 3 * time.Millisecond, Tokens: 8, Metrics: true})
			res, _ := runSlots(t, e, c.workers, 48, c.mode)
			if res.Summary.Evidence.Engine != c.dialect {
				t.Errorf("engine detected %+v", res.Summary.Evidence)
			}
			if ask := res.Summary.Evidence; c.dialect == openaitest.DialectVLLM && c.mode == "" &&
				(ask.Field != "include_metrics" || ask.Requests != 48 || len(ask.Returned) != 0) {
				t.Errorf("evidence %+v: want every request asked and nothing back", ask)
			}
			f := finding(res.Report, "server-queueing")
			switch {
			case c.title == "" && f != nil:
				t.Errorf("queueing named with slots enough for the workers: %+v", f)
			case c.title == "":
			case f == nil:
				t.Errorf("no queueing finding: %+v", res.Report.Findings)
			case f.Title != c.title || !strings.Contains(f.Evidence, c.says) || !strings.Contains(f.Evidence, "is unknown"):
				t.Errorf("finding %q: %s\nwant %q saying %q and that the split is unknown", f.Title, f.Evidence, c.title, c.says)
			}
		})
	}
}

// TestEngineDecodeBehindTheGateway: behind tokentrace's gateway the
// engine's own decode (llama.cpp's predicted_ms, vLLM's
// generation_time_ms) stays the server's decode in the path — not the
// gateway→server link's stream tail — and no "outside the model" finding
// fires; the queue and prefill are the same as read directly. llama.cpp
// is run over completions too, as the issue (#36) found it with bench
// --endpoint completions --concurrency 4.
func TestEngineDecodeBehindTheGateway(t *testing.T) {
	for _, c := range []struct{ dialect, endpoint string }{
		{openaitest.DialectLlamaCpp, EndpointChat}, {openaitest.DialectLlamaCpp, EndpointCompletions}, {openaitest.DialectVLLM, EndpointChat},
	} {
		d := c.dialect
		t.Run(d+" "+c.endpoint, func(t *testing.T) {
			e := openaitest.StartSlots(t, &openaitest.SlotEngine{Dialect: d, Slots: 2, Prefill: 20 * time.Millisecond,
				PerToken: 3 * time.Millisecond, Tokens: 16, Evidence: true, Metrics: true})
			gw, _ := gatewaytest.Start(t, gatewaytest.OnePool(e.URL(), d))
			res, _ := runEndpoint(t, gw, c.endpoint, true, 4, 24, ServerMetricsVLLM)
			if f := finding(res.Report, "outside-model"); f != nil {
				t.Errorf("a finding blames the outside of the model: %s", f.Evidence)
			}
			var decode, tail float64
			for _, g := range res.Report.Decomposition.Groups {
				for _, st := range g.Stages {
					switch {
					case st.Hop == string(latency.HopServer) && st.Stage == string(latency.StageDecode):
						decode += st.MeanMS
					case st.Stage == string(latency.StageStreamTail):
						tail += st.MeanMS
					}
				}
			}
			// 15 tokens 3 ms apart: about 45 ms of decode a request.
			if decode < 3*40 || tail > decode/10 {
				t.Errorf("server decode %.1f ms, stream tails %.1f ms over the groups: the engine's decode is not the server's", decode, tail)
			}
		})
	}
}

// TestEngineAskedThroughTheGateway: behind a tokentrace gateway (whose
// /metrics are its own) bench still detects vLLM, from the models the
// gateway passes on, asks with include_metrics, and the gateway's split
// of vLLM's metrics comes back on every request.
func TestEngineAskedThroughTheGateway(t *testing.T) {
	e := openaitest.StartSlots(t, &openaitest.SlotEngine{Dialect: openaitest.DialectVLLM, Slots: 2,
		Prefill: 2 * time.Millisecond, PerToken: time.Millisecond, Tokens: 4, Evidence: true, Metrics: true})
	gw, _ := gatewaytest.Start(t, gatewaytest.OnePool(e.URL(), "vllm"))
	res, _ := runURL(t, gw, 2, 8, "")
	ask := res.Summary.Evidence
	if ask.Engine != latency.EngineVLLM || ask.Field != "include_metrics" || ask.Returned["server-timing (vllm)"] != 8 {
		t.Errorf("evidence %+v", ask)
	}
	for _, rq := range e.Log() {
		if !rq.Asked {
			t.Errorf("request %s reached the engine without include_metrics", rq.ID)
		}
	}
}

// TestDetectEngine reads each sign of an engine, and says when the
// target is a tokentrace gateway whose engine nothing names.
func TestDetectEngine(t *testing.T) {
	for _, c := range []struct {
		name, metrics, owner, server, props string
		engine, by                          string
	}{
		{"metrics names", "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs 0\n", "x", "", "", "sglang", "its /metrics names (sglang:…)"},
		{"owned_by", "", "vllm", "", "", "vllm", `GET /v1/models (owned_by "vllm")`},
		{"server header", "", "x", "llama.cpp", "", "llamacpp", "its Server header (llama.cpp)"},
		{"props", "", "x", "", `{"default_generation_settings":{},"total_slots":4}`, "llamacpp", "GET /props (llama.cpp's total_slots)"},
		{"a gateway", "# TYPE tokentrace_gateway_in_flight gauge\ntokentrace_gateway_in_flight{pool=\"a\"} 0\n", "pool-a", "", "", "", behindGateway},
		{"nothing", "", "x", "", "", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case r.URL.Path == "/metrics" && c.metrics != "":
					_, _ = io.WriteString(w, c.metrics)
				case r.URL.Path == "/v1/models":
					if c.server != "" {
						w.Header().Set("Server", c.server)
					}
					fmt.Fprintf(w, `{"data":[{"id":"m","owned_by":%q}]}`, c.owner)
				case r.URL.Path == "/props" && c.props != "":
					_, _ = io.WriteString(w, c.props)
				default:
					http.NotFound(w, r)
				}
			}))
			defer srv.Close()
			e, by := detectEngine(context.Background(), Target{BaseURL: srv.URL})
			if e != c.engine || by != c.by {
				t.Errorf("detected %q from %q, want %q from %q", e, by, c.engine, c.by)
			}
		})
	}
}

// askingGateway is a gateway whose one pool asks its vLLM replica for its
// per-request metrics (evidence: ask).
func askingGateway(t *testing.T, url string) string {
	t.Helper()
	gw, _ := gatewaytest.Start(t, "pools:\n  - name: default\n    evidence: ask\n    replicas: [{url: \""+url+
		"\", kind: vllm}]\nroutes:\n  - {model: \"*\", pool: default}\n")
	return gw
}

// TestGatewayAsksTheEngine: a gateway configured to ask (evidence: ask)
// in front of a stand-in answering as vLLM's merged per-request metrics
// do, its client asking nothing (--server-metrics off): every request
// reaches the engine with include_metrics, each record's queue wait,
// prefill and decode are the server's within 2 ms (the gateway's
// Server-Timing), the gateway's server_queue and prefill histograms sum
// the server's, and the client's
// answers carry neither the metrics object nor the usage chunk it did not
// ask for.
func TestGatewayAsksTheEngine(t *testing.T) {
	e := openaitest.StartSlots(t, &openaitest.SlotEngine{Dialect: openaitest.DialectVLLM, Slots: 2,
		Prefill: 8 * time.Millisecond, PerToken: time.Millisecond, Tokens: 8, Evidence: true, Metrics: true})
	gw := askingGateway(t, e.URL())
	res, _ := runURL(t, gw, 6, 48, ServerMetricsOff)
	if ask := res.Summary.Evidence; ask.Field != "" || ask.Returned["server-timing (vllm)"] != 48 {
		t.Errorf("evidence %+v: want nothing asked by bench and the gateway's split of vLLM's metrics on every request", ask)
	}
	server := map[string]openaitest.SlotRequest{}
	var sum, sumPrefill time.Duration
	for _, rq := range e.Log() {
		if !rq.Asked {
			t.Errorf("request %s reached the engine without include_metrics", rq.ID)
		}
		server[rq.ID] = rq
		sum += rq.Queue
		sumPrefill += rq.Prefill
	}
	within := func(got int64, want time.Duration) bool { d := got - int64(want); return d <= 2e6 && d >= -2e6 }
	for _, rec := range readRecords(t, filepath.Join(res.OutDir, "requests.jsonl")) {
		rq, ok := server[rec.ID]
		if !ok || rec.Server == nil || rec.Server.Engine != latency.EngineVLLM {
			t.Fatalf("record %s: split %+v, logged %v", rec.ID, rec.Server, ok)
		}
		// The same split as directly: queue, prefill and decode.
		if !within(rec.Server.QueueNS, rq.Queue) || !within(rec.Server.PrefillNS, rq.Prefill) || !within(rec.Server.DecodeNS, rq.Decode) {
			t.Errorf("record %s: split %v %v %v, the server's %v %v %v", rec.ID, time.Duration(rec.Server.QueueNS),
				time.Duration(rec.Server.PrefillNS), time.Duration(rec.Server.DecodeNS), rq.Queue, rq.Prefill, rq.Decode)
		}
	}
	u, _ := scrape.MetricsURL(gw)
	fams, err := scrape.Get(context.Background(), http.DefaultClient, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []struct {
		name string
		sum  time.Duration
	}{{"server_queue", sum}, {"prefill", sumPrefill}} { // decode has no stage histogram: the trailer carries it
		var got float64
		if f := fams["tokentrace_gateway_stage_"+h.name+"_seconds"]; f != nil {
			for _, m := range f.GetMetric() {
				got += m.GetHistogram().GetSampleSum()
			}
		}
		if d := got - h.sum.Seconds(); d > 48*2e-3 || d < -48*2e-3 {
			t.Errorf("the gateway's %s histogram sums %.4f s, the server's %.4f s", h.name, got, h.sum.Seconds())
		}
	}
	for _, stream := range []bool{true, false} {
		body := fmt.Sprintf(`{"model":"stand-in","stream":%v,"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, stream)
		resp, err := http.Post(gw+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		timing := strings.Join(resp.Trailer.Values("Server-Timing"), ",")
		if bytes.Contains(b, []byte(`"metrics"`)) || bytes.Contains(b, []byte(`"prompt_tokens"`)) && stream || !strings.Contains(timing, "server_queue") {
			t.Errorf("stream %v: the client got what it did not ask for, or no split:\n%s\ntrailer %q", stream, b, timing)
		}
	}
}

// TestTRTLLMPerfMetricsJoined: against a stand-in in trtllm-serve's shape
// (answers without evidence, ids "chatcmpl-<engine id>", GET
// /perf_metrics), directly and behind a gateway (which passes
// /perf_metrics and the ids through), bench detects TensorRT-LLM from
// /perf_metrics, reads it after the run and joins every streamed request
// to its record by id: each record's queue wait is the server's within 2
// ms, 6 workers on 2 slots are named as queueing from that split, and
// the path holds the server's queue (behind the gateway, inside its
// upstream_ttft).
func TestTRTLLMPerfMetricsJoined(t *testing.T) {
	for _, behind := range []bool{false, true} {
		t.Run(map[bool]string{false: "direct", true: "behind the gateway"}[behind], func(t *testing.T) { trtllmJoined(t, behind) })
	}
}

// trtllmJoined is TestTRTLLMPerfMetricsJoined directly or behind a
// gateway, which passes /perf_metrics and the answers' ids through.
func trtllmJoined(t *testing.T, behind bool) {
	e := openaitest.StartSlots(t, &openaitest.SlotEngine{Dialect: openaitest.DialectTRTLLM, Slots: 2,
		Prefill: 8 * time.Millisecond, PerToken: time.Millisecond, Tokens: 8, Evidence: true})
	url := e.URL()
	if behind {
		url, _ = gatewaytest.Start(t, gatewaytest.OnePool(e.URL(), "trtllm"))
	}
	res, text := runURL(t, url, 6, 48, "")
	ask := res.Summary.Evidence
	if ask.Engine != latency.EngineTRTLLM || ask.Joined != 48 || ask.PerfRecords != 48 {
		t.Fatalf("evidence %+v", ask)
	}
	if !strings.Contains(text, "trtllm-perf-metrics on 48") {
		t.Errorf("the summary does not say what came back:\n%s", text)
	}
	server := map[string]openaitest.SlotRequest{}
	for _, rq := range e.Log() {
		server[rq.ID] = rq
	}
	for _, rec := range readRecords(t, filepath.Join(res.OutDir, "requests.jsonl")) {
		rq, ok := server[rec.ID]
		if !ok || rec.ServerID != "chatcmpl-"+rq.EngineID || rec.Server == nil || rec.Server.Source != latency.SourceTRTLLMPerfMetrics {
			t.Fatalf("record %s (answer %s): split %+v, logged %v %+v", rec.ID, rec.ServerID, rec.Server, ok, rq)
		}
		if d := rec.Server.QueueNS - int64(rq.Queue); d > 2e6 || d < -2e6 {
			t.Errorf("record %s: queue %v, the server's %v", rec.ID, time.Duration(rec.Server.QueueNS), rq.Queue)
		}
	}
	// The path holds the server's hop (behind the gateway: the joined
	// split, not the gateway's whole upstream_ttft).
	var queue float64
	for _, g := range res.Report.Decomposition.Groups {
		for _, st := range g.Stages {
			if st.Hop == string(latency.HopServer) && st.Stage == string(latency.TimingServerQueue) {
				queue += st.MeanMS
			}
		}
	}
	if queue <= 0 {
		t.Errorf("no server queue in the path's groups")
	}
	if f := finding(res.Report, "server-queueing"); f == nil || !strings.Contains(f.Evidence, "Server queueing is the largest TTFT term") {
		t.Errorf("queueing not named from the joined split: %+v\n%s", f, text)
	}
}

// TestGatewayComparesWithDirect: bench through a gateway in front of a
// stand-in answering as vLLM (its merged per-request metrics, its gauges)
// reads the engine's /metrics through the gateway's /upstream/metrics
// (run.json's server: engine vllm, via that URL, waiting above zero with 6
// workers on 2 slots), and the comparison with a direct run has every
// server stage (server.*) in both runs: only the links and the gateway's
// own hop differ (client→server directly; client→gateway and
// gateway→server through it).
func TestGatewayComparesWithDirect(t *testing.T) {
	e := openaitest.StartSlots(t, &openaitest.SlotEngine{Dialect: openaitest.DialectVLLM, Slots: 2,
		Prefill: 8 * time.Millisecond, PerToken: time.Millisecond, Tokens: 8, Evidence: true, Metrics: true})
	direct, _ := runSlots(t, e, 6, 48, "")
	gw := askingGateway(t, e.URL())
	through, _ := runURL(t, gw, 6, 48, ServerMetricsOff)
	info, ok, err := results.ReadRunInfo(through.OutDir)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if s := info.Server; s == nil || s.Engine != latency.EngineVLLM || !strings.HasSuffix(s.Via, "/upstream/metrics") {
		t.Fatalf("server behind the gateway: %+v", s)
	}
	var peak float64
	for _, s := range info.Samples {
		peak = max(peak, s.Waiting)
	}
	if peak < 1 {
		t.Errorf("vllm:num_requests_waiting through the gateway peaked at %v", peak)
	}
	opts := report.Options{Resamples: 200}
	ca, err := report.Collect(context.Background(), []string{direct.OutDir}, opts)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := report.Collect(context.Background(), []string{through.OutDir}, opts)
	if err != nil {
		t.Fatal(err)
	}
	server := 0
	for _, row := range report.Compare(ca, cb).Rows {
		if strings.HasPrefix(row.Metric, "server.") {
			server++
			if row.Only != "" {
				t.Errorf("%s %s only in %s", row.Metric, row.Stat, row.Only)
			}
		}
	}
	if server == 0 {
		t.Error("no server stage compared")
	}
}

// TestLlamaCppQueueingStandIn is llama.cpp's scenario of the per-engine
// known-answer suite: against a stand-in answering with llama.cpp's
// timings and gauges (2 slots, 6 closed-loop workers), the slot wait is
// inferred from the timings and named as queueing, with the gauges.
func TestLlamaCppQueueingStandIn(t *testing.T) {
	e := openaitest.StartSlots(t, &openaitest.SlotEngine{Dialect: openaitest.DialectLlamaCpp, Slots: 2,
		Prefill: 20 * time.Millisecond, PerToken: 3 * time.Millisecond, Tokens: 8, Evidence: true, Metrics: true})
	res, _ := runSlots(t, e, 6, 48, "")
	if ask := res.Summary.Evidence; ask.Engine != latency.EngineLlamaCpp || ask.Returned["llamacpp-timings"] != 48 {
		t.Errorf("evidence %+v", ask)
	}
	f := finding(res.Report, "server-queueing")
	if f == nil || !strings.Contains(f.Evidence, "llamacpp:requests_deferred") {
		t.Errorf("queueing not named from llama.cpp's timings and gauges: %+v", f)
	}
}

// TestSGLangNativeMetaInfo: bench speaking SGLang's native /generate
// (--endpoint sglang) to a stand-in that answers as SGLang with
// --enable-metrics does (2 slots, 6 closed-loop workers), streamed and
// whole: every request's meta_info becomes its split, the queue wait
// within 2 ms of the one the stand-in measured, and the report names
// slot queueing from that split with sglang:num_queue_reqs quoted.
func TestSGLangNativeMetaInfo(t *testing.T) {
	for _, stream := range []bool{true, false} {
		t.Run(map[bool]string{true: "stream", false: "whole"}[stream], func(t *testing.T) {
			e := openaitest.StartSlots(t, &openaitest.SlotEngine{Dialect: openaitest.DialectSGLang, Slots: 2,
				Prefill: 8 * time.Millisecond, PerToken: time.Millisecond, Tokens: 8, Evidence: true, Metrics: true})
			res, text := runEndpoint(t, e.URL(), EndpointSGLang, stream, 6, 48, "")
			if ask := res.Summary.Evidence; ask == nil || ask.Engine != latency.EngineSGLang || ask.Field != "" {
				t.Fatalf("evidence %+v", ask)
			}
			if !strings.Contains(text, "sglang-meta-info on 48 of 48") {
				t.Errorf("the summary does not say what came back:\n%s", text)
			}
			server := map[string]openaitest.SlotRequest{}
			for _, rq := range e.Log() {
				server[rq.ID] = rq
			}
			var waited int
			for _, rec := range readRecords(t, filepath.Join(res.OutDir, "requests.jsonl")) {
				rq, ok := server[rec.ID]
				if !ok || rec.Server == nil || rec.Server.Source != latency.SourceSGLangMetaInfo || rec.OutputTokens != 8 || rec.InputTokens != 8 {
					t.Fatalf("record %s: split %+v, tokens %d in %d out, logged %v", rec.ID, rec.Server, rec.InputTokens, rec.OutputTokens, ok)
				}
				if d := rec.Server.QueueNS - int64(rq.Queue); d > 2e6 || d < -2e6 {
					t.Errorf("record %s: queue %v, the server's %v", rec.ID, time.Duration(rec.Server.QueueNS), rq.Queue)
				}
				if rq.Queue > 2*time.Millisecond {
					waited++
				}
			}
			if waited < 24 {
				t.Errorf("only %d of 48 requests waited over 2 ms for a slot: the stand-in did not queue", waited)
			}
			f := finding(res.Report, "server-queueing")
			if f == nil || !strings.Contains(f.Evidence, "Server queueing is the largest TTFT term") || f.Numbers["server_waiting_peak"] < 1 {
				t.Errorf("queueing not named from the split with the waiting gauge: %+v\n%s", f, text)
			}
		})
	}
}

// TestGatewayAsksEachKind: a pool that asks (evidence: ask) asks each
// replica kind in its own words, or not at all where its OpenAI API has
// no field to ask with — vLLM with include_metrics, tokentrace serve with
// return_metrics; SGLang, TGI, llama.cpp and TensorRT-LLM with nothing
// (whose stand-in refuses any field it does not know, as trtllm-serve's
// request models do, so that one added would fail every request) — and
// the split behind the gateway is the engine's: vLLM's and tokentrace's
// objects read by the gateway (queue within 2 ms of the stand-in's),
// llama.cpp's timings, TensorRT-LLM's /perf_metrics joined by bench
// through the gateway; none from SGLang's and TGI's streams.
func TestGatewayAsksEachKind(t *testing.T) {
	for _, c := range []struct {
		kind           string
		asked, ret     bool   // include_metrics, return_metrics reached the engine
		engine, source string // of each record's split; "" none
	}{
		{openaitest.DialectVLLM, true, false, latency.EngineVLLM, latency.SourceServerTiming},
		{openaitest.DialectTokentrace, false, true, latency.EngineTokentrace, latency.SourceServerTiming},
		{openaitest.DialectLlamaCpp, false, false, latency.EngineLlamaCpp, latency.SourceServerTiming},
		{openaitest.DialectTRTLLM, false, false, latency.EngineTRTLLM, latency.SourceTRTLLMPerfMetrics},
		{openaitest.DialectSGLang, false, false, "", ""},
		{openaitest.DialectTGI, false, false, "", ""},
	} {
		t.Run(c.kind, func(t *testing.T) {
			e := openaitest.StartSlots(t, &openaitest.SlotEngine{Dialect: c.kind, Slots: 2,
				Prefill: 8 * time.Millisecond, PerToken: time.Millisecond, Tokens: 8, Evidence: true, Metrics: true})
			gw, _ := gatewaytest.Start(t, "pools:\n  - name: default\n    evidence: ask\n    replicas: [{url: \""+e.URL()+
				"\", kind: "+c.kind+"}]\nroutes:\n  - {model: \"*\", pool: default}\n")
			mode := ServerMetricsOff // bench asks nothing: what reaches the engine is the gateway's ask
			if c.kind == openaitest.DialectTRTLLM {
				mode = "" // auto: bench joins /perf_metrics after the run (it sends no field)
			}
			res, text := runURL(t, gw, 6, 24, mode)
			server := map[string]openaitest.SlotRequest{}
			for _, rq := range e.Log() {
				if rq.Asked != c.asked || rq.ReturnMetrics != c.ret {
					t.Errorf("request %s reached the engine with include_metrics %v, return_metrics %v", rq.ID, rq.Asked, rq.ReturnMetrics)
				}
				server[rq.ID] = rq
			}
			recs := readRecords(t, filepath.Join(res.OutDir, "requests.jsonl"))
			if len(recs) != 24 {
				t.Fatalf("%d records", len(recs))
			}
			for _, rec := range recs {
				rq, logged := server[rec.ID]
				if !rec.OK() || !logged {
					t.Fatalf("record %s: %s %s (logged %v)\n%s", rec.ID, rec.ErrorKind, rec.Error, logged, text)
				}
				if c.engine == "" {
					if rec.Server != nil && rec.Server.Engine != "" {
						t.Errorf("record %s: a split %+v from an engine that gives none", rec.ID, rec.Server)
					}
					continue
				}
				if rec.Server == nil || rec.Server.Engine != c.engine || rec.Server.Source != c.source {
					t.Fatalf("record %s: split %+v, want %s's from %s", rec.ID, rec.Server, c.engine, c.source)
				}
				if c.kind == openaitest.DialectLlamaCpp {
					continue // llama.cpp reports no queue wait
				}
				if d := rec.Server.QueueNS - int64(rq.Queue); d > 2e6 || d < -2e6 {
					t.Errorf("record %s: queue %v, the server's %v", rec.ID, time.Duration(rec.Server.QueueNS), rq.Queue)
				}
			}
		})
	}
}

// TestTRTLLMWholeAnswersJoinedByTime: whole answers from a stand-in in
// trtllm-serve's shape (a random id; /perf_metrics records with the
// front end's server_arrival_time; GET /steady_clock_offset) are joined
// by their instants: each joined record's queue wait is the one the
// stand-in measured for that very request (within 2 ms), and the summary
// says how many were joined by instants. The stand-in's two slots run in
// step, so most requests have a twin sent and answered within a
// millisecond whose record fits as well; the twins' splits agree, so both
// are joined (48 of 48 here); on a loaded machine a pair whose splits
// drift apart stays unjoined, so half is asked for.
func TestTRTLLMWholeAnswersJoinedByTime(t *testing.T) {
	e := openaitest.StartSlots(t, &openaitest.SlotEngine{Dialect: openaitest.DialectTRTLLM, Slots: 2,
		Prefill: 8 * time.Millisecond, PerToken: time.Millisecond, Tokens: 8, Evidence: true})
	res, text := runEndpoint(t, e.URL(), EndpointChat, false, 6, 48, "")
	ask := res.Summary.Evidence
	if ask.Engine != latency.EngineTRTLLM || ask.PerfRecords != 48 || ask.JoinedByTime < 24 || ask.Joined != ask.JoinedByTime {
		t.Fatalf("evidence %+v\n%s", ask, text)
	}
	server := map[string]openaitest.SlotRequest{}
	for _, rq := range e.Log() {
		server[rq.ID] = rq
	}
	joined := 0
	for _, rec := range readRecords(t, filepath.Join(res.OutDir, "requests.jsonl")) {
		if rec.Server == nil {
			continue
		}
		joined++
		rq := server[rec.ID]
		if d := rec.Server.QueueNS - int64(rq.Queue); d > 2e6 || d < -2e6 {
			t.Errorf("record %s: joined a split with queue %v, the server's %v", rec.ID, time.Duration(rec.Server.QueueNS), rq.Queue)
		}
	}
	if joined != ask.Joined {
		t.Errorf("%d records hold a split, the summary says %d", joined, ask.Joined)
	}
	t.Logf("joined %d of 48 whole answers by their instants", joined)
}
