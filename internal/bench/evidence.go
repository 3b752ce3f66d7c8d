package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openai"
	"github.com/tokentrace/tokentrace/internal/scrape"
)

// How bench asks the server for its per-request evidence (--server-metrics).
const (
	// ServerMetricsAuto asks in the dialect of the engine bench detects:
	// vLLM's include_metrics; nothing where the evidence comes unasked
	// (tokentrace's Server-Timing, llama.cpp's timings, TGI's headers) or
	// where the engine is not known (a strict API refuses a field it does
	// not know).
	ServerMetricsAuto = "auto"
	// ServerMetricsOff asks for nothing.
	ServerMetricsOff = "off"
	// ServerMetricsVLLM sends "include_metrics": true whatever the engine.
	ServerMetricsVLLM = "vllm"
	// ServerMetricsTokentrace sends "return_metrics": true (tokentrace
	// serve's metrics object, with its scheduling instants).
	ServerMetricsTokentrace = "tokentrace"
)

// The request body fields that ask for a metrics object.
const (
	fieldIncludeMetrics = "include_metrics" // vLLM (docs/features/per_request_metrics.md)
	fieldReturnMetrics  = "return_metrics"  // tokentrace serve
)

// EvidenceAsk is what a run asked the server for about each request, the
// engine it took the server for, and what came back (summary.json's
// evidence).
type EvidenceAsk struct {
	// Mode is --server-metrics: auto, off, vllm or tokentrace.
	Mode string `json:"mode"`
	// Engine is the engine detected (vllm, sglang, tgi, llamacpp,
	// tokentrace, ollama), "" when none was; DetectedBy says from what.
	Engine     string `json:"engine,omitempty"`
	DetectedBy string `json:"detected_by,omitempty"`
	// Field is the body field sent as true on every request
	// (include_metrics, return_metrics), "" for none; Asked says in words
	// what the run asked for and what the engine sends unasked.
	Field string `json:"field,omitempty"`
	Asked string `json:"asked"`
	// Requests is how many requests were sent with Field.
	Requests int `json:"requests"`
	// Returned counts the successful requests by the evidence their split
	// came from (the report's server_evidence); Succeeded is their number.
	Returned  map[string]int `json:"returned,omitempty"`
	Succeeded int            `json:"succeeded"`
	// PerfRecords is how many records TensorRT-LLM's /perf_metrics gave
	// after the run, Joined how many of the run's requests they were
	// joined to (by the answer's id).
	PerfRecords int `json:"perf_records,omitempty"`
	Joined      int `json:"joined,omitempty"`
	// JoinedByTime is how many of Joined were whole answers joined by
	// their instants (the server's steady clock read through GET
	// /steady_clock_offset), not by id.
	JoinedByTime int `json:"joined_by_time,omitempty"`
}

// unasked is what each engine sends about a request without being asked.
var unasked = map[string]string{
	latency.EngineTokentrace: "Server-Timing on every answer (--server-metrics tokentrace asks for its metrics object too)",
	latency.EngineLlamaCpp:   "llama.cpp's timings on every answer",
	latency.EngineTGI:        "TGI's x-queue-time and x-inference-time headers on whole answers",
	latency.EngineOllama:     "nothing on its OpenAI API (durations only on its native /api)",
	latency.EngineSGLang:     "nothing per request on its OpenAI API (--endpoint sglang reads its native /generate meta_info)",
}

// chooseField is the body field that asks the engine for its metrics
// object under mode, and the words for what was asked.
func chooseField(mode, engine string) (field, asked string) {
	switch mode {
	case ServerMetricsOff:
		return "", "nothing (--server-metrics off)"
	case ServerMetricsVLLM:
		return fieldIncludeMetrics, `vLLM's per-request metrics ("include_metrics": true on every request)`
	case ServerMetricsTokentrace:
		return fieldReturnMetrics, `tokentrace's per-request metrics ("return_metrics": true on every request)`
	}
	if engine == latency.EngineVLLM {
		return fieldIncludeMetrics, `vLLM's per-request metrics ("include_metrics": true on every request; ` +
			`the server returns them when started with --enable-per-request-metrics)`
	}
	if engine == latency.EngineTRTLLM {
		return "", "TensorRT-LLM's per-request perf metrics: GET /perf_metrics after the run, joined by each streamed " +
			"answer's id, a whole answer by its instants (GET /steady_clock_offset); trtllm-serve keeps them when started " +
			"with return_perf_metrics and perf_metrics_max_requests"
	}
	if w, ok := unasked[engine]; ok {
		return "", "nothing: the engine sends " + w
	}
	return "", "nothing: the engine is not known, and a strict API refuses a field it does not know"
}

// behindGateway is detectEngine's words for a target whose /metrics are
// a tokentrace gateway's and whose engine nothing else named.
const behindGateway = "a tokentrace gateway (its /metrics); the engine behind it is not named: " +
	"--server-metrics vllm asks vLLM through it"

// detectEngine names the engine behind t, and from what: its /metrics
// names, GET /v1/models's owned_by, the Server header, llama.cpp's
// /props. engine is "" when none says (by then says
// whether the target is a tokentrace gateway).
func detectEngine(ctx context.Context, t Target) (engine, by string) {
	e, by, gateway := probeEngine(ctx, t)
	if e == "" && gateway {
		by = behindGateway
	}
	return e, by
}

func probeEngine(ctx context.Context, t Target) (engine, by string, gateway bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	hc := &http.Client{Timeout: 5 * time.Second, CheckRedirect: httplimit.NoRedirects}
	header := http.Header{}
	t.authorize(header)
	if u, err := scrape.MetricsURL(t.BaseURL); err == nil {
		if fams, err := scrape.Get(ctx, hc, u, header); err == nil {
			if e, ok := scrape.Detect(fams); ok {
				return e.Name, "its /metrics names (" + e.Prefix + "…)", false
			}
			for name := range fams {
				gateway = gateway || strings.HasPrefix(name, "tokentrace_gateway_")
			}
		}
		if gateway {
			if u, err := scrape.RootURL(t.BaseURL, scrape.UpstreamMetricsPath); err == nil {
				if fams, err := scrape.Get(ctx, hc, u, header); err == nil {
					if e, ok := scrape.Detect(fams); ok {
						return e.Name, "its engine's /metrics names through the gateway (" + e.Prefix + "…)", true
					}
				}
			}
		}
	}
	if u, err := t.apiURL("/models"); err == nil {
		if b, resp := probe(ctx, hc, u, header); resp != nil {
			if e := serverHeaderEngine(resp.Header.Get("Server")); e != "" {
				return e, "its Server header (" + resp.Header.Get("Server") + ")", gateway
			}
			if e, owner := ownedByEngine(b); e != "" {
				return e, `GET /v1/models (owned_by "` + owner + `")`, gateway
			}
		}
	}
	if u, err := scrape.MetricsURL(t.BaseURL); err == nil {
		if p, err := scrape.Props(ctx, hc, u, header); err == nil && p["max_num_seqs"] != "" {
			return latency.EngineLlamaCpp, "GET /props (llama.cpp's total_slots)", gateway
		}
	}
	if perfMetrics(ctx, hc, t, header) {
		return latency.EngineTRTLLM, "GET /perf_metrics (trtllm-serve's)", gateway
	}
	// No /version: vLLM's and TensorRT-LLM's both answer {"version": …}.
	return "", "", gateway
}

// perfMetrics says whether the target answers GET /perf_metrics with a
// JSON array of TensorRT-LLM's records (trtllm-serve; reading them
// empties its store, which before a run holds only earlier requests').
func perfMetrics(ctx context.Context, hc *http.Client, t Target, header http.Header) bool {
	u, err := scrape.RootURL(t.BaseURL, "/perf_metrics")
	if err != nil {
		return false
	}
	b, _ := probe(ctx, hc, u, header)
	if b == nil {
		return false
	}
	_, err = latency.ParseTRTLLMPerfMetrics(b)
	return err == nil
}

// probe GETs u and returns its body (at most 1 MiB) when the status is
// 200; resp is nil otherwise.
func probe(ctx context.Context, hc *http.Client, u string, header http.Header) ([]byte, *http.Response) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, nil
	}
	req.Header = header.Clone()
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, nil
	}
	return b, resp
}

// serverHeaderEngine is the engine a Server header names (llama-server
// sends "llama.cpp").
func serverHeaderEngine(v string) string {
	if strings.HasPrefix(strings.ToLower(v), "llama.cpp") {
		return latency.EngineLlamaCpp
	}
	return ""
}

// ownedByEngine is the engine the first model's owned_by names: vLLM's
// "vllm", SGLang's "sglang", llama-server's "llamacpp", tokentrace
// serve's "tokentrace", Ollama's "library" (its models' namespace).
func ownedByEngine(b []byte) (engine, owner string) {
	var list openai.ModelList
	if json.Unmarshal(b, &list) != nil || len(list.Data) == 0 {
		return "", ""
	}
	owner = list.Data[0].OwnedBy
	switch owner {
	case "vllm":
		return latency.EngineVLLM, owner
	case "sglang":
		return "sglang", owner
	case "llamacpp":
		return latency.EngineLlamaCpp, owner
	case "tokentrace":
		return latency.EngineTokentrace, owner
	case "library", "ollama":
		return latency.EngineOllama, owner
	}
	return "", owner
}

// askEvidence detects the engine and chooses how to ask it for its
// per-request evidence (Target.MetricsField), and says so.
func (r *run) askEvidence(ctx context.Context) {
	mode := r.target.ServerMetrics
	if mode == "" {
		mode = ServerMetricsAuto
	}
	ask := &EvidenceAsk{Mode: mode}
	if r.cfg.Embedded() {
		ask.Engine, ask.DetectedBy = latency.EngineTokentrace, "the embedded engine"
	} else {
		ask.Engine, ask.DetectedBy = detectEngine(ctx, r.target)
	}
	ask.Field, ask.Asked = chooseField(mode, ask.Engine)
	if r.target.api() == openai.APISGLang {
		// /generate takes no metrics field: meta_info comes on every
		// answer, its timing when the server runs with --enable-metrics.
		ask.Field, ask.Asked = "", "nothing: SGLang's native /generate sends meta_info on every answer "+
			"(queue_time and its instants when the server runs with --enable-metrics)"
	}
	r.target.MetricsField = ask.Field
	r.target.AnswerID = mode != ServerMetricsOff && ask.Engine == latency.EngineTRTLLM
	r.sum.Evidence = ask
	eng := "not detected"
	switch {
	case ask.Engine != "":
		eng = ask.Engine + ", from " + ask.DetectedBy
	case ask.DetectedBy != "":
		eng = "not detected: " + ask.DetectedBy
	}
	fmt.Fprintf(r.log, "bench: server engine %s; per-request evidence asked for: %s\n", eng, ask.Asked)
}

// evidenceLine is the text summary's line on the evidence asked for and
// what came back.
func evidenceLine(a *EvidenceAsk) string {
	var came []string
	for k, n := range a.Returned {
		came = append(came, fmt.Sprintf("%s on %d", k, n))
	}
	back := "no per-request split came back"
	if len(came) > 0 {
		slices.Sort(came)
		back = fmt.Sprintf("came back: %s of %d succeeded", strings.Join(came, ", "), a.Succeeded)
	}
	eng := "engine not detected"
	switch {
	case a.Engine != "":
		eng = "engine " + a.Engine + " (" + a.DetectedBy + ")"
	case a.DetectedBy != "":
		eng = a.DetectedBy
	}
	asked := a.Asked
	if a.Field != "" {
		asked = fmt.Sprintf("%q on %d requests", a.Field, a.Requests)
	}
	return fmt.Sprintf("evidence  %s; asked %s; %s", eng, asked, back)
}
