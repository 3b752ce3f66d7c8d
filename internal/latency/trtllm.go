package latency

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"
)

// SourceTRTLLMPerfMetrics is a record of TensorRT-LLM's /perf_metrics
// (ParseTRTLLMPerfMetrics), read after a run and joined by request id.
const SourceTRTLLMPerfMetrics = "trtllm-perf-metrics"

// EngineTRTLLM is TensorRT-LLM's trtllm-serve.
const EngineTRTLLM = "trtllm"

// TRTLLMPerf is one request's record of TensorRT-LLM's GET /perf_metrics
// (trtllm-serve with return_perf_metrics; tensorrt_llm/serve/
// openai_server.py, get_perf_metrics): its timing_metrics instants, in
// seconds of the server's steady clock, as a server split.
type TRTLLMPerf struct {
	// RequestID is the record's request_id as text (the engine's own id).
	RequestID string
	// Split: queue = first_scheduled_time − arrival_time, prefill =
	// first_token_time − first_scheduled_time, decode = last_token_time −
	// first_token_time (unreported when last_token_time is absent).
	Split *ServerSplit
	// KVTransferNS is kv_cache_transfer_end − kv_cache_transfer_start, a
	// disaggregated decode instance's wait for the prompt's KV cache: a
	// stage of its own, in no field of Split. KVCacheBytes is
	// kv_cache_size. Both 0 when the record has none.
	KVTransferNS, KVCacheBytes int64
	// ArrivalS and DoneS are the request's arrival at the server
	// (server_arrival_time, the HTTP front end's, else arrival_time) and
	// its end (last_token_time, else first_token_time), in seconds of the
	// server's steady clock: what a whole answer, whose id is random, is
	// joined by (its sending and its end on the client's clock, through
	// GET /steady_clock_offset).
	ArrivalS, DoneS float64
}

// MaxTRTLLMRecords bounds how many records ParseTRTLLMPerfMetrics reads
// (the server keeps perf_metrics_max_requests of them).
const MaxTRTLLMRecords = 1 << 20

// ParseTRTLLMPerfMetrics reads /perf_metrics' answer: a JSON array of
// records {"request_id", "perf_metrics": {"timing_metrics": {...}}}.
// Keys are exact; a record without arrival_time, first_scheduled_time and
// first_token_time as ordered non-negative numbers is skipped. The error
// is for an answer that is no array of objects.
func ParseTRTLLMPerfMetrics(raw []byte) ([]TRTLLMPerf, error) {
	var recs []struct {
		RequestID   json.RawMessage `json:"request_id"`
		PerfMetrics *struct {
			TimingMetrics json.RawMessage `json:"timing_metrics"`
		} `json:"perf_metrics"`
	}
	if err := json.Unmarshal(raw, &recs); err != nil {
		return nil, err
	}
	if len(recs) > MaxTRTLLMRecords {
		return nil, errors.New("perf_metrics: too many records")
	}
	var out []TRTLLMPerf
	for _, r := range recs {
		if r.PerfMetrics == nil {
			continue
		}
		p, ok := trtllmRecord(r.PerfMetrics.TimingMetrics)
		if !ok {
			continue
		}
		p.RequestID = requestIDText(r.RequestID)
		out = append(out, p)
	}
	return out, nil
}

func trtllmRecord(timing []byte) (TRTLLMPerf, bool) {
	m, ok := numbers(timing)
	if !ok {
		return TRTLLMPerf{}, false
	}
	a, ok1 := m["arrival_time"]
	fs, ok2 := m["first_scheduled_time"]
	ft, ok3 := m["first_token_time"]
	if !ok1 || !ok2 || !ok3 || !instant(a, fs, ft) || !seconds(fs-a, ft-fs) {
		return TRTLLMPerf{}, false
	}
	sp := &ServerSplit{QueueNS: secNS(fs - a), PrefillNS: secNS(ft - fs), Source: SourceTRTLLMPerfMetrics, Engine: EngineTRTLLM}
	if lt, ok := m["last_token_time"]; ok && instant(lt) && seconds(lt-ft) {
		sp.DecodeNS = secNS(lt - ft)
	} else {
		sp.Unreported = []string{SplitDecode}
	}
	p := TRTLLMPerf{Split: sp, ArrivalS: a, DoneS: ft}
	if sa, ok := m["server_arrival_time"]; ok && instant(sa) && sa <= a {
		p.ArrivalS = sa
	}
	if sp.DecodeNS > 0 || len(sp.Unreported) == 0 {
		p.DoneS = m["last_token_time"]
	}
	s, ok1 := m["kv_cache_transfer_start"]
	e, ok2 := m["kv_cache_transfer_end"]
	if ok1 && ok2 && instant(s, e) && seconds(e-s) {
		p.KVTransferNS = secNS(e - s)
		sp.KVTransferNS = p.KVTransferNS
		if b, ok := m["kv_cache_size"]; ok && b >= 0 && b < 1e18 {
			p.KVCacheBytes = int64(b)
		}
	}
	return p, true
}

// requestIDText is a request_id, a number or a string, as text; "" for
// anything else.
func requestIDText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		if _, err := strconv.ParseFloat(n.String(), 64); err == nil {
			return n.String()
		}
	}
	return ""
}

// TRTLLMRequestID is the engine's request id an answer of trtllm-serve
// carries in its id ("chatcmpl-7", "cmpl-7": the prefix and the engine's
// id, postprocess_handlers.py's stream_response_id), the key of its
// /perf_metrics record; "" for an id of another shape (a whole answer's
// id is random).
func TRTLLMRequestID(answerID string) string {
	for _, p := range []string{"chatcmpl-", "cmpl-"} {
		if rest, ok := strings.CutPrefix(answerID, p); ok && rest != "" && len(rest) <= 20 && strings.Trim(rest, "0123456789") == "" {
			return rest
		}
	}
	return ""
}

// ParseSteadyClockOffset reads trtllm-serve's GET /steady_clock_offset
// answer {"receive_ts", "transmit_ts"}: its steady clock, in seconds, when
// the request arrived and when it answered. Keys are exact; both must be
// instants with receive_ts ≤ transmit_ts.
func ParseSteadyClockOffset(raw []byte) (receive, transmit time.Duration, err error) {
	m, ok := numbers(raw)
	r, ok1 := m["receive_ts"]
	x, ok2 := m["transmit_ts"]
	if !ok || !ok1 || !ok2 || !instant(r, x) || x < r {
		return 0, 0, errors.New(`steady_clock_offset: want {"receive_ts", "transmit_ts"}, instants in seconds in order`)
	}
	return time.Duration(secNS(r)), time.Duration(secNS(x)), nil
}
