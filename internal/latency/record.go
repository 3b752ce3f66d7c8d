package latency

import "time"

// RecordSchema is the version of Record that this build writes. Readers
// accept records whose "v" is at most this and refuse newer ones by name.
// Version 2 added Timing, TimingNotes and MaxTokens; a version 1 record
// has none of them and reads as before (its split is in Server and
// GatewayNS).
const RecordSchema = 2

// Token-count sources, for Record.InputSource and Record.OutputSource.
const (
	SourceUsage           = "usage"            // the final usage object
	SourceContinuousUsage = "continuous_usage" // usage on every chunk
	SourceChunks          = "chunks"           // one token per content chunk
	SourceRequest         = "request"          // what the client asked for (input only)
)

// ErrorKind is why a request failed, by kind (Record.ErrorKind,
// ToolSpan.ErrorKind); the empty kind means success.
type ErrorKind string

// The kinds of failure.
const (
	FailConnect      ErrorKind = "connect"       // could not connect (refused, DNS, TLS)
	FailTimeout      ErrorKind = "timeout"       // no answer, or no progress, within the timeout
	FailHTTP4xx      ErrorKind = "http_4xx"      // a 4xx status other than 429
	FailRateLimited  ErrorKind = "http_429"      // 429 Too Many Requests
	FailHTTP5xx      ErrorKind = "http_5xx"      // a 5xx status
	FailStreamCut    ErrorKind = "stream_cut"    // stream ended without [DONE] / finish
	FailInvalidEvent ErrorKind = "invalid_event" // an event that is not valid JSON or not the expected shape
	FailReset        ErrorKind = "reset"         // connection reset or broken mid-response
	FailCanceled     ErrorKind = "canceled"      // the run was stopped while the request was in flight
	FailServer       ErrorKind = "server_error"  // an error object inside a 200 stream
	// An agent step's tool calls (Record.Tools): a tool endpoint that
	// refused the connection, answered a status ≥ 400 or a body that is
	// not a result fails the step with FailTool; one that gave no answer
	// within the tool timeout with FailToolTimeout.
	FailTool        ErrorKind = "tool_error"
	FailToolTimeout ErrorKind = "tool_timeout"
)

// Record is one request as the load generator measured it: the seam between
// bench (which writes requests.jsonl, one Record per line) and report (which
// reads it). Instants are nanoseconds since the run's start instant, read
// from a monotonic clock; an instant after SentNS that did not happen is 0.
type Record struct {
	Schema int    `json:"v"`
	ID     string `json:"id"` // client request id, sent as X-Request-Id
	// Seq is the request's place in its run's send order, from 1 (bench
	// and simulate number their requests as they send them; the ID ends
	// with it); 0 in records written before it was kept.
	Seq      int64  `json:"seq,omitempty"`
	ServerID string `json:"server_id,omitempty"` // id the server answered with, if different (its X-Request-Id; for TensorRT-LLM the answer's id, joined to /perf_metrics)
	Model    string `json:"model,omitempty"`
	Stream   bool   `json:"stream"`
	Warmup   bool   `json:"warmup,omitempty"` // excluded from results
	Phase    string `json:"phase,omitempty"`  // sweep point or run label, e.g. "rate=20"
	Session  int64  `json:"session,omitempty"`
	// Turn is the request's 1-based place in its session (a turn of a
	// conversation, a step of an agent session); 0 for single requests.
	Turn int `json:"turn,omitempty"`
	// Steps is how many steps the request's agent session has (0: not an
	// agent session), so that a reader tells a whole session from one cut
	// short.
	Steps int `json:"steps,omitempty"`
	// MaxTokens is the output limit the request asked for (0: unknown).
	MaxTokens int `json:"max_tokens,omitempty"`

	IntendedNS    int64 `json:"intended_ns"`               // when the schedule meant to send it
	SentNS        int64 `json:"sent_ns"`                   // when the client began sending it
	ConnectNS     int64 `json:"connect_ns,omitempty"`      // duration of connection set-up; 0 if reused
	WroteNS       int64 `json:"wrote_ns,omitempty"`        // instant the request was fully written
	FirstByteNS   int64 `json:"first_byte_ns,omitempty"`   // instant of the first response byte
	FirstReasonNS int64 `json:"first_reason_ns,omitempty"` // first reasoning token, if any
	FirstTokenNS  int64 `json:"first_token_ns,omitempty"`  // first content token
	EndNS         int64 `json:"end_ns,omitempty"`          // end of the response (after [DONE])

	// ChunkNS holds the arrival instant of every content-bearing stream
	// event, the first one equal to FirstTokenNS; ChunkTokens the number of
	// output tokens each carried (1 each when the server gives no per-chunk
	// counts). Non-streaming responses have one chunk at EndNS.
	ChunkNS     []int64 `json:"chunk_ns,omitempty"`
	ChunkTokens []int32 `json:"chunk_tokens,omitempty"`
	// OtherNS holds the arrival instants of stream events that carried a
	// choice but no content token (a role-only first chunk, reasoning
	// deltas, an empty finish chunk); LastEventNS is the last data event
	// before [DONE] (often the usage chunk). Other tools time these events
	// (docs/metrics.md, "Compatibility views"); tokentrace's own metrics
	// never do.
	OtherNS     []int64 `json:"other_ns,omitempty"`
	LastEventNS int64   `json:"last_event_ns,omitempty"`

	InputTokens int `json:"input_tokens"`
	// InputTokensRequested is the prompt length the workload asked for,
	// written only where it differs from InputTokens (the server counted
	// the prompt otherwise: its tokenizer and chat template); docs/
	// metrics.md, "Requested and served prompt lengths".
	InputTokensRequested int `json:"input_tokens_requested,omitempty"`
	OutputTokens         int `json:"output_tokens"`
	ReasoningTokens      int `json:"reasoning_tokens,omitempty"`
	// CachedTokens is how many prompt tokens the server said its prefix
	// cache supplied (usage.prompt_tokens_details.cached_tokens).
	CachedTokens int `json:"cached_tokens,omitempty"`
	// SharedPrefixTokens is how many of the prompt's first tokens the
	// workload shares with other requests: what prefix caching could
	// reuse (docs/metrics.md, "Prompt tokens shared and cached"). Written
	// by bench for generated workloads and prompt files; 0 when unknown.
	SharedPrefixTokens int `json:"shared_prefix_tokens,omitempty"`
	// PrefixBlocks are the ids of the prompt's leading blocks of
	// PrefixBlockTokens tokens each, as the workload built it (a Mooncake
	// trace row's hash_ids, those its input covers): two prompts whose
	// blocks begin with the same ids begin with the same tokens, so a
	// replay of the records rebuilds the sharing (docs/metrics.md, "Prompt
	// tokens shared and cached"). Empty when the workload has no blocks.
	// Added within version 2.
	PrefixBlocks      []int64 `json:"prefix_blocks,omitempty"`
	PrefixBlockTokens int     `json:"prefix_block_tokens,omitempty"`
	InputSource       string  `json:"input_source,omitempty"`
	OutputSource      string  `json:"output_source,omitempty"`
	FinishReason      string  `json:"finish_reason,omitempty"`

	Status int `json:"status,omitempty"`
	// Resent is how many times the client sent the request again because
	// the pooled keep-alive connection it took had been closed or reset by
	// the server before any byte of answer (internal/staleconn): at most
	// one resend of ours, on a fresh connection, plus any Go's transport
	// made for a request it had not written at all. A resent request that
	// then succeeded is a success; its instants are the resend's, from the
	// first send (SentNS).
	Resent    int       `json:"resent,omitempty"`
	ErrorKind ErrorKind `json:"error_kind,omitempty"`
	Error     string    `json:"error,omitempty"`

	// Server is the server's own split of the request, when it gave one.
	Server *ServerSplit `json:"server,omitempty"`
	// Gateway is a tokentrace gateway's own time, when one was on the path.
	GatewayNS int64  `json:"gateway_ns,omitempty"`
	TraceID   string `json:"trace_id,omitempty"`

	// Timing is every stage the hops on the path reported in Server-Timing
	// (ParseTiming: grouped by hop in path order); Path decomposes E2E
	// with it. TimingNotes says what was set aside and why (a malformed
	// entry, a duplicate, a hop claiming more time than the request took).
	Timing      []HopStage `json:"timing,omitempty"`
	TimingNotes []string   `json:"timing_notes,omitempty"`

	// Tools are the tool calls an agent step made once its answer ended,
	// in the order the step asked for them, on the record's clock;
	// ToolsParallel says they were made at once rather than one after
	// another. The step is over when the last of them is (ToolsEnd). A
	// failed call fails the step: ErrorKind is its kind (FailTool,
	// FailToolTimeout) and Error names the step and the call. Added within
	// version 2: a reader that does not know them reads the step's model
	// call as before.
	Tools         []ToolSpan `json:"tools,omitempty"`
	ToolsParallel bool       `json:"tools_parallel,omitempty"`
}

// ToolSpan is one tool call of an agent step.
type ToolSpan struct {
	Name    string `json:"name"`
	StartNS int64  `json:"start_ns"` // when the call was sent
	EndNS   int64  `json:"end_ns"`   // when its answer was read, or it failed
	// ResultTokens is the result's length by tokentrace's tokenizer.
	ResultTokens int       `json:"result_tokens,omitempty"`
	ErrorKind    ErrorKind `json:"error_kind,omitempty"`
	Error        string    `json:"error,omitempty"`
}

// ToolsEnd is when the step's last tool call ended; EndNS when it made none.
func (r *Record) ToolsEnd() int64 {
	end := r.EndNS
	for _, t := range r.Tools {
		end = max(end, t.EndNS)
	}
	return end
}

// ServerSplit is the server-side part of a request's latency as reported by
// the server: tokentrace's Server-Timing trailer, a per-request metrics
// object (vLLM's, tokentrace's), llama.cpp's timings, TGI's headers or
// Ollama's durations (docs/engines.md). Durations are nanoseconds.
type ServerSplit struct {
	QueueNS   int64 `json:"queue_ns"`
	PrefillNS int64 `json:"prefill_ns"`
	DecodeNS  int64 `json:"decode_ns"`
	// LoadNS is the time the engine spent getting the model ready for
	// this request before its prefill (Ollama's load_duration: a model
	// not in memory is loaded first), when the evidence says; inside the
	// time before prefill, never part of QueueNS.
	LoadNS int64 `json:"load_ns,omitempty"`
	// KVTransferNS is a disaggregated decode instance's transfer of the
	// prompt's KV cache from the prefill instance, when its evidence says
	// (TensorRT-LLM's kv_cache_transfer_start → end): a stage of its own,
	// in none of QueueNS, PrefillNS, DecodeNS.
	KVTransferNS int64 `json:"kv_transfer_ns,omitempty"`
	// Source is the evidence the split was read from (Source* constants:
	// "server-timing", "vllm-metrics", "llamacpp-timings", "tgi-headers",
	// "ollama-durations", "sglang-meta-info", "trtllm-perf-metrics").
	Source string `json:"source"`
	// Engine is the server the evidence names (Engine* constants), "" when
	// it does not say (Server-Timing is any hop's).
	Engine string `json:"engine,omitempty"`
	// Unreported lists the stages (SplitQueue, SplitPrefill, SplitDecode)
	// the evidence does not give; their fields are 0 or, for TGI's
	// prefill, inside decode. Empty: all three are the server's own.
	// llama.cpp and Ollama report no queue wait, TGI no prefill apart
	// from decode.
	Unreported []string `json:"unreported,omitempty"`
	// Derived lists the stages the evidence gives only by inference, not
	// as that stage's own time: vLLM's merged per-request metrics give
	// prefill as time_to_first_token_ms, from the request first
	// scheduled to its first token.
	Derived []string `json:"derived,omitempty"`
	// FirstScheduledUnixNS is when the server first scheduled the request
	// (the start of the step that first computed part of its prompt), in
	// Unix nanoseconds on the server's clock, when its per-request metrics
	// object says (vLLM's first_scheduled_time; tokentrace's arrival_time
	// + frontend_time_ms + queue_time_ms); 0 otherwise. The instants of
	// one server's requests compare with each other exactly, free of the
	// network and the client; with the client's clock they do not.
	FirstScheduledUnixNS int64 `json:"first_scheduled_unix_ns,omitempty"`
}

// OK reports whether the request succeeded.
func (r *Record) OK() bool { return r.ErrorKind == "" }

// FirstOutputNS is the first output token's instant of any kind: the
// earlier of FirstReasonNS and FirstTokenNS that happened; 0 when none did.
func (r *Record) FirstOutputNS() int64 {
	if r.FirstReasonNS != 0 && (r.FirstTokenNS == 0 || r.FirstReasonNS < r.FirstTokenNS) {
		return r.FirstReasonNS
	}
	return r.FirstTokenNS
}

// TTFT is FirstOutputNS − SentNS: the first token of any kind, reasoning
// included; ok is false when no token arrived.
func (r *Record) TTFT() (d time.Duration, ok bool) {
	first := r.FirstOutputNS()
	if first == 0 {
		return 0, false
	}
	return time.Duration(first - r.SentNS), true
}

// TTFTAnswer is FirstTokenNS − SentNS: the first answer (content) token;
// ok is false when none arrived (an answer that was all reasoning).
func (r *Record) TTFTAnswer() (d time.Duration, ok bool) {
	if r.FirstTokenNS == 0 {
		return 0, false
	}
	return time.Duration(r.FirstTokenNS - r.SentNS), true
}

// TTFTIntended is FirstOutputNS − IntendedNS: TTFT including client
// queueing.
func (r *Record) TTFTIntended() (d time.Duration, ok bool) {
	first := r.FirstOutputNS()
	if first == 0 {
		return 0, false
	}
	return time.Duration(first - r.IntendedNS), true
}

// E2E is EndNS − SentNS; ok is false when the response never ended.
func (r *Record) E2E() (d time.Duration, ok bool) {
	if r.EndNS == 0 {
		return 0, false
	}
	return time.Duration(r.EndNS - r.SentNS), true
}

// E2EIntended is EndNS − IntendedNS.
func (r *Record) E2EIntended() (d time.Duration, ok bool) {
	if r.EndNS == 0 {
		return 0, false
	}
	return time.Duration(r.EndNS - r.IntendedNS), true
}

// ClientQueue is SentNS − IntendedNS.
func (r *Record) ClientQueue() time.Duration { return time.Duration(r.SentNS - r.IntendedNS) }

// TPOT is (EndNS − FirstTokenNS) / (OutputTokens − 1), the answer's tokens
// after its first (reasoning apart); ok is false with fewer than two
// output tokens or a missing instant.
func (r *Record) TPOT() (d time.Duration, ok bool) {
	if r.OutputTokens < 2 || r.FirstTokenNS == 0 || r.EndNS == 0 {
		return 0, false
	}
	return time.Duration((r.EndNS - r.FirstTokenNS) / int64(r.OutputTokens-1)), true
}

// ITLs appends the request's inter-token latencies to dst and returns it.
// The first chunk's extra tokens arrived with the first token (gaps of 0);
// each later chunk that arrived g after the previous one and carries k tokens
// contributes k gaps of g/k. There are OutputTokens−1 of them when the chunk
// counts add up, and they sum to the last chunk's instant − FirstTokenNS.
func (r *Record) ITLs(dst []int64) []int64 {
	for i := range r.ChunkNS {
		k := int64(1)
		if i < len(r.ChunkTokens) {
			k = int64(r.ChunkTokens[i])
		}
		if k <= 0 {
			continue
		}
		if i == 0 {
			for j := int64(1); j < k; j++ {
				dst = append(dst, 0)
			}
			continue
		}
		g := r.ChunkNS[i] - r.ChunkNS[i-1]
		if k == 1 { // the common case, without the divisions
			dst = append(dst, g)
			continue
		}
		q, rem := g/k, g%k
		for j := int64(0); j < k; j++ {
			v := q
			if j < rem { // spread the remainder so the gaps sum exactly to g
				v++
			}
			dst = append(dst, v)
		}
	}
	return dst
}

// ICLs appends the gaps between consecutive content-bearing chunks to dst.
func (r *Record) ICLs(dst []int64) []int64 {
	for i := 1; i < len(r.ChunkNS); i++ {
		dst = append(dst, r.ChunkNS[i]-r.ChunkNS[i-1])
	}
	return dst
}

// MaxStall is the longest gap between consecutive content chunks.
func (r *Record) MaxStall() time.Duration {
	var m int64
	for i := 1; i < len(r.ChunkNS); i++ {
		if g := r.ChunkNS[i] - r.ChunkNS[i-1]; g > m {
			m = g
		}
	}
	return time.Duration(m)
}

// Value returns the request's value of metric m; ok is false when the
// request has none (a failed request, or TPOT of a one-token answer). For
// ITL and ICL it is the request's largest gap, the value a per-request
// threshold is judged on.
func (r *Record) Value(m Metric) (time.Duration, bool) {
	switch m {
	case TTFT:
		return r.TTFT()
	case TTFTAnswer:
		return r.TTFTAnswer()
	case TTFTIntended:
		return r.TTFTIntended()
	case TPOT:
		return r.TPOT()
	case E2E:
		return r.E2E()
	case E2EIntended:
		return r.E2EIntended()
	case ClientQueue:
		return r.ClientQueue(), true
	case ITL:
		var m int64
		var any bool
		for _, g := range r.ITLs(nil) {
			any = true
			m = max(m, g)
		}
		return time.Duration(m), any
	case ICL:
		if len(r.ChunkNS) < 2 {
			return 0, false
		}
		return r.MaxStall(), true
	}
	return 0, false
}

// MeetsAll reports whether a successful request meets every objective; a
// failed request meets none. A metric the request has no value for (TPOT of
// a one-token answer) does not count against it.
func (r *Record) MeetsAll(slos []SLO) bool {
	if !r.OK() {
		return false
	}
	for _, s := range slos {
		if v, ok := r.Value(s.Metric); ok && !s.Met(v) {
			return false
		}
	}
	return true
}
