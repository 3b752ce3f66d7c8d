package openaitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/sse"
)

// The dialects a SlotEngine speaks (SlotEngine.Dialect): which engine's
// per-request evidence, /metrics names and owned_by it answers with.
const (
	// DialectVLLM: vLLM's merged per-request metrics object (on a whole
	// answer and on a stream's final usage chunk) when Evidence is set and
	// the request asked with "include_metrics": true; vllm:* gauges;
	// owned_by "vllm".
	DialectVLLM = "vllm"
	// DialectLlamaCpp: llama.cpp's timings (always, when Evidence is set);
	// llamacpp:requests_processing and requests_deferred; owned_by
	// "llamacpp"; GET /props with total_slots (Slots) and n_ctx 4096.
	DialectLlamaCpp = "llamacpp"
	// DialectSGLang: no per-request evidence on its OpenAI API; sglang:*
	// gauges with max_running_requests; owned_by "sglang". Its native
	// POST /generate ({"text", "sampling_params": {"max_new_tokens"},
	// "stream"}) answers {"text", "output_ids", "meta_info"} — streamed,
	// one event per token with the text so far, then [DONE] — and, when
	// Evidence is set, the finished request's meta_info carries
	// queue_time, inference_time, e2e_latency and the request_received_ts,
	// prefill_finished_ts and decode_finished_ts instants, as SGLang run
	// with --enable-metrics does (a stand-in written from the source that
	// docs/engines.md cites, not SGLang).
	DialectSGLang = "sglang"
	// DialectTGI: no evidence on a stream; tgi_queue_size and
	// tgi_batch_current_size; owned_by "tgi".
	DialectTGI = "tgi"
	// DialectOllama: Ollama's OpenAI endpoint: no evidence, no /metrics;
	// owned_by "library".
	DialectOllama = "ollama"
	// DialectTRTLLM: trtllm-serve's shape: an answer's id is
	// "chatcmpl-<the engine's request id>", no evidence on the answer;
	// GET /perf_metrics (when Evidence is set) returns, and forgets, the
	// finished requests' records {request_id, perf_metrics:
	// {timing_metrics: {server_arrival_time, arrival_time,
	// first_scheduled_time, first_token_time, last_token_time}}} in
	// seconds of a steady clock, which GET /steady_clock_offset answers
	// ({receive_ts, transmit_ts}); a whole answer's id is random, and a
	// body with a field trtllm-serve does not know is refused
	// (internal/latency/testdata/engines cites the source).
	DialectTRTLLM = "trtllm"
	// DialectTokentrace: tokentrace serve's metrics object
	// (frontend_time_ms 0, queue_time_ms, prefill_time_ms,
	// time_to_first_token_ms, generation_time_ms, e2e_time_ms,
	// arrival_time) on a whole answer and on a stream's final usage chunk
	// when Evidence is set and the request asked with "return_metrics":
	// true; vllm:* gauges; owned_by "tokentrace". Unlike serve it sends no
	// Server-Timing, so the object is the only evidence.
	DialectTokentrace = "tokentrace"
)

// SlotEngine is a stand-in engine for tests: Slots requests run at once,
// the rest wait in a queue (first come, first served), each running one
// Prefill then Tokens tokens PerToken apart, on the wall clock. It
// answers in its Dialect — the engine's documented shapes, written from
// their sources as internal/latency/testdata/engines cites — and keeps a
// log of what each request asked and waited (Log), so a test compares
// what the client recorded with what the server knew.
type SlotEngine struct {
	Dialect string
	// Slots is how many requests run at once (1 when 0).
	Slots int
	// Prefill is the time from a slot taken to the first token; PerToken
	// between tokens; Tokens the answer's length (4 when 0).
	Prefill, PerToken time.Duration
	Tokens            int
	// Evidence makes it send its dialect's per-request evidence; Metrics
	// serves its dialect's gauges at /metrics (not for Ollama).
	Evidence, Metrics bool

	srv     *httptest.Server
	slots   chan struct{}
	mu      sync.Mutex
	waiting int
	running int
	log     []SlotRequest
	start   time.Time // the steady clock's zero (DialectTRTLLM)
	seq     int       // the engine's last request id
	perf    []string  // /perf_metrics records not yet read
}

// SlotRequest is what a SlotEngine knew of one request.
type SlotRequest struct {
	// ID is the request's X-Request-Id header.
	ID string
	// Asked reports "include_metrics": true in its body; ReturnMetrics
	// "return_metrics": true.
	Asked, ReturnMetrics bool
	// Queue is the wait for a slot; Prefill and Decode the slot's time to
	// the first token and from it to the last.
	Queue, Prefill, Decode time.Duration
	// EngineID is the engine's own id of the request (its answer's id).
	EngineID string
}

// StartSlots serves e on a loopback test server until the test ends.
func StartSlots(t testing.TB, e *SlotEngine) *SlotEngine {
	t.Helper()
	e.slots = make(chan struct{}, max(e.Slots, 1))
	e.start = time.Now()
	e.srv = httptest.NewServer(e)
	t.Cleanup(e.srv.Close)
	return e
}

// URL is the engine's base URL.
func (e *SlotEngine) URL() string { return e.srv.URL }

// Log is a copy of what the engine knew of each answered request.
func (e *SlotEngine) Log() []SlotRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]SlotRequest(nil), e.log...)
}

// ServeHTTP answers /v1/models, /metrics, completions and, as
// llama-server, /props (its slots as total_slots).
func (e *SlotEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/v1/models":
		owner := map[string]string{DialectOllama: "library"}[e.Dialect]
		if owner == "" {
			owner = e.Dialect
		}
		fmt.Fprintf(w, `{"object":"list","data":[{"id":"stand-in","object":"model","created":1,"owned_by":%q}]}`, owner)
	case r.URL.Path == "/props" && e.Dialect == DialectLlamaCpp:
		fmt.Fprintf(w, `{"default_generation_settings":{"n_ctx":4096},"total_slots":%d}`, cap(e.slots))
	case r.URL.Path == "/metrics" && e.Metrics && e.Dialect != DialectOllama && e.Dialect != DialectTRTLLM:
		e.gauges(w)
	case r.URL.Path == "/steady_clock_offset" && e.Dialect == DialectTRTLLM:
		now := 1000 + time.Since(e.start).Seconds()
		fmt.Fprintf(w, `{"receive_ts":%.6f,"transmit_ts":%.6f}`, now, now)
	case r.URL.Path == "/perf_metrics" && e.Dialect == DialectTRTLLM:
		e.mu.Lock()
		recs := e.perf
		e.perf = nil
		e.mu.Unlock()
		fmt.Fprintf(w, "[%s]", strings.Join(recs, ","))
	case strings.HasSuffix(r.URL.Path, "/completions"):
		e.complete(w, r)
	case r.URL.Path == "/generate" && e.Dialect == DialectSGLang:
		e.generate(w, r)
	default:
		http.NotFound(w, r)
	}
}

// gauges writes the dialect's waiting and running gauges (and SGLang's
// max_running_requests).
func (e *SlotEngine) gauges(w io.Writer) {
	e.mu.Lock()
	wait, run := e.waiting, e.running
	e.mu.Unlock()
	names := map[string][2]string{
		DialectVLLM:       {"vllm:num_requests_waiting", "vllm:num_requests_running"},
		DialectTokentrace: {"vllm:num_requests_waiting", "vllm:num_requests_running"},
		DialectLlamaCpp:   {"llamacpp:requests_deferred", "llamacpp:requests_processing"},
		DialectSGLang:     {"sglang:num_queue_reqs", "sglang:num_running_reqs"},
		DialectTGI:        {"tgi_queue_size", "tgi_batch_current_size"},
	}[e.Dialect]
	if names[0] == "" {
		return
	}
	fmt.Fprintf(w, "# TYPE %s gauge\n%s %d\n# TYPE %s gauge\n%s %d\n", names[0], names[0], wait, names[1], names[1], run)
	if e.Dialect == DialectSGLang {
		fmt.Fprintf(w, "# TYPE sglang:max_running_requests gauge\nsglang:max_running_requests %d\n", cap(e.slots))
	}
}

func (e *SlotEngine) count(dw, dr int) {
	e.mu.Lock()
	e.waiting += dw
	e.running += dr
	e.mu.Unlock()
}

func (e *SlotEngine) complete(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Stream         bool `json:"stream"`
		IncludeMetrics bool `json:"include_metrics"`
		ReturnMetrics  bool `json:"return_metrics"`
	}
	arrived := time.Now()
	raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil {
		err = json.Unmarshal(raw, &body)
	}
	if err != nil {
		http.Error(w, `{"error":{"message":"bad body"}}`, http.StatusBadRequest)
		return
	}
	if e.Dialect == DialectTRTLLM && (bytes.Contains(raw, []byte(`"include_metrics"`)) || bytes.Contains(raw, []byte(`"return_metrics"`))) {
		// trtllm-serve's request models forbid fields they do not know.
		http.Error(w, `{"object":"error","message":"Extra inputs are not permitted","type":"BadRequestError","code":400}`, http.StatusBadRequest)
		return
	}
	rq := SlotRequest{ID: r.Header.Get("X-Request-Id"), Asked: body.IncludeMetrics, ReturnMetrics: body.ReturnMetrics}
	queued, scheduled, ok := e.slot(r, &rq)
	if !ok {
		return
	}
	defer e.release()
	id := "x"
	if e.Dialect == DialectTRTLLM {
		id = "chatcmpl-" + rq.EngineID
	}
	first, n := e.prefill(scheduled, &rq)
	var sw *sse.Writer
	if body.Stream {
		w.Header().Set("Content-Type", "text/event-stream")
		sw = sse.NewWriter(w)
		_ = sw.Data([]byte(`{"id":"` + id + `","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"t0 "},"finish_reason":null}],"usage":null}`))
	}
	for i := 1; i < n; i++ {
		time.Sleep(e.PerToken)
		if sw != nil {
			_ = sw.Data(fmt.Appendf(nil, `{"id":%q,"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"t%d "},"finish_reason":null}],"usage":null}`, id, i))
		}
	}
	rq.Decode = time.Since(first)
	extra := e.evidence(rq, n)
	e.mu.Lock()
	e.log = append(e.log, rq)
	if e.Dialect == DialectTRTLLM && e.Evidence {
		at := func(t time.Time) float64 { return 1000 + t.Sub(e.start).Seconds() }
		e.perf = append(e.perf, fmt.Sprintf(`{"request_id":%s,"perf_metrics":{"first_iter":1,"last_iter":%d,"timing_metrics":`+
			`{"server_arrival_time":%.6f,"arrival_time":%.6f,"first_scheduled_time":%.6f,"first_token_time":%.6f,"last_token_time":%.6f}}}`,
			rq.EngineID, n, at(arrived), at(queued), at(scheduled), at(first), at(first.Add(rq.Decode))))
	}
	e.mu.Unlock()
	usage := fmt.Sprintf(`"usage":{"prompt_tokens":8,"completion_tokens":%d,"total_tokens":%d}`, n, 8+n)
	if sw == nil {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-random","object":"chat.completion","model":"stand-in","choices":[{"index":0,"message":{"role":"assistant","content":"done"},"finish_reason":"length"}],%s%s}`, usage, extra)
		return
	}
	sw.Queue([]byte(`{"id":"` + id + `","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"length"}],"usage":null}`))
	sw.Queue([]byte(`{"id":"` + id + `","object":"chat.completion.chunk","choices":[],` + usage + extra + `}`))
	_ = sw.Final(nil)
}

// evidence is the dialect's per-request member for the answer (with its
// leading comma), "" for none.
func (e *SlotEngine) evidence(rq SlotRequest, n int) string {
	if !e.Evidence {
		return ""
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	switch e.Dialect {
	case DialectVLLM:
		if !rq.Asked {
			return ""
		}
		itl := "null"
		if n > 1 {
			itl = fmt.Sprintf("%.3f", ms(rq.Decode)/float64(n-1))
		}
		return fmt.Sprintf(`,"metrics":{"time_to_first_token_ms":%.3f,"generation_time_ms":%.3f,"queue_time_ms":%.3f,"mean_itl_ms":%s,"tokens_per_second":%.1f}`,
			ms(rq.Prefill), ms(rq.Decode), ms(rq.Queue), itl, float64(n)/(rq.Prefill+rq.Decode).Seconds())
	case DialectTokentrace:
		if !rq.ReturnMetrics {
			return ""
		}
		return fmt.Sprintf(`,"metrics":{"arrival_time":%.6f,"frontend_time_ms":0,"queue_time_ms":%.3f,"prefill_time_ms":%.3f,"time_to_first_token_ms":%.3f,"generation_time_ms":%.3f,"e2e_time_ms":%.3f}`,
			float64(time.Now().Add(-rq.Queue-rq.Prefill-rq.Decode).UnixNano())/1e9, ms(rq.Queue), ms(rq.Prefill), ms(rq.Queue+rq.Prefill), ms(rq.Decode), ms(rq.Queue+rq.Prefill+rq.Decode))
	case DialectLlamaCpp:
		return fmt.Sprintf(`,"timings":{"cache_n":0,"prompt_n":8,"prompt_ms":%.3f,"predicted_n":%d,"predicted_ms":%.3f}`, ms(rq.Prefill), n, ms(rq.Decode))
	}
	return ""
}

// slot waits for a slot as a request of rq, counting it waiting then
// running; ok is false when the request ended first. release gives the
// slot back.
func (e *SlotEngine) slot(r *http.Request, rq *SlotRequest) (queued, scheduled time.Time, ok bool) {
	queued = time.Now()
	e.mu.Lock()
	e.seq++
	rq.EngineID = fmt.Sprint(e.seq)
	e.mu.Unlock()
	e.count(1, 0)
	select {
	case e.slots <- struct{}{}:
	case <-r.Context().Done():
		e.count(-1, 0)
		return queued, queued, false
	}
	scheduled = time.Now()
	e.count(-1, 1)
	rq.Queue = scheduled.Sub(queued)
	return queued, scheduled, true
}

func (e *SlotEngine) release() { <-e.slots; e.count(0, -1) }

// generate answers SGLang's native /generate (DialectSGLang).
func (e *SlotEngine) generate(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Text           string `json:"text"`
		Stream         bool   `json:"stream"`
		SamplingParams struct {
			MaxNewTokens int `json:"max_new_tokens"`
		} `json:"sampling_params"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body); err != nil || body.Text == "" {
		http.Error(w, `{"object":"error","message":"bad body","type":"Bad Request","param":null,"code":400}`, http.StatusBadRequest)
		return
	}
	rq := SlotRequest{ID: r.Header.Get("X-Request-Id")}
	queued, scheduled, ok := e.slot(r, &rq)
	if !ok {
		return
	}
	defer e.release()
	first, n := e.prefill(scheduled, &rq)
	var sw *sse.Writer
	if body.Stream {
		w.Header().Set("Content-Type", "text/event-stream")
		sw = sse.NewWriter(w)
	}
	text := ""
	meta := func(i int, finish string) string {
		return fmt.Sprintf(`"meta_info":{"id":%q,"finish_reason":%s,"prompt_tokens":8,"weight_version":"default","total_retractions":0,"completion_tokens":%d,"cached_tokens":0`,
			rq.EngineID, finish, i)
	}
	for i := 1; i <= n; i++ {
		if i > 1 {
			time.Sleep(e.PerToken)
		}
		text += fmt.Sprintf("t%d ", i-1)
		if sw != nil && i < n {
			_ = sw.Data(fmt.Appendf(nil, `{"text":%q,"output_ids":[%d],%s}}`, text, i, meta(i, "null")))
		}
	}
	end := time.Now()
	rq.Decode = end.Sub(first)
	e.mu.Lock()
	e.log = append(e.log, rq)
	e.mu.Unlock()
	last := fmt.Sprintf(`{"text":%q,"output_ids":[%d],%s`, text, n, meta(n, `{"type":"length","length":`+fmt.Sprint(n)+`}`))
	if e.Evidence {
		unix := func(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
		last += fmt.Sprintf(`,"queue_time":%.6f,"e2e_latency":%.6f,"request_received_ts":%.6f,"prefill_finished_ts":%.6f,"decode_finished_ts":%.6f,"inference_time":%.6f`,
			rq.Queue.Seconds(), end.Sub(queued).Seconds(), unix(queued), unix(first), unix(end), end.Sub(scheduled).Seconds())
	}
	last += "}}"
	if sw == nil {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, last)
		return
	}
	_ = sw.Data([]byte(last))
	_ = sw.Final(nil)
}

// prefill takes the engine's prefill for a request scheduled at scheduled,
// records it, and returns its first token's instant and the answer's
// length in tokens (Tokens, 4 when unset).
func (e *SlotEngine) prefill(scheduled time.Time, rq *SlotRequest) (first time.Time, n int) {
	time.Sleep(e.Prefill)
	first = time.Now()
	rq.Prefill = first.Sub(scheduled)
	n = e.Tokens
	if n <= 0 {
		n = 4
	}
	return first, n
}
