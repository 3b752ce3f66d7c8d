package latency

import "time"

// TimingName is a Server-Timing metric name: the one vocabulary
// tokentrace serve and the tokentrace gateway send and SplitServerTiming
// reads. Each name means one thing whoever sends it (docs/metrics.md,
// "Server-Timing names").
type TimingName string

// A server's own stages of a request (tokentrace serve sends them; a
// gateway passes on the upstream's queue, prefill and decode under the
// same names).
const (
	// TimingFrontend is the server's time before the engine: body read,
	// JSON decode, validation, tokenization.
	TimingFrontend TimingName = "frontend"
	// TimingServerQueue is the time the request waited in the server's
	// scheduler.
	TimingServerQueue TimingName = "server_queue"
	// TimingPrefill is the server's time from first scheduled to first token.
	TimingPrefill TimingName = "prefill"
	// TimingServerDecode is the server's time from first token to last token.
	TimingServerDecode TimingName = "server_decode"
	// TimingFault is delay the server injected on purpose (fault injection).
	TimingFault TimingName = "fault"
	// TimingServerReasoning is a reasoning model's reasoning tokens'
	// decode: the server's time from its first token (the first reasoning
	// token) to its first answer token. It lies inside server_decode, so it
	// is a figure beside the server's stages, not one of them (RoleInfo).
	TimingServerReasoning TimingName = "server_reasoning"
	// TimingServerEngine carries no duration: its desc names the engine
	// whose own per-request evidence a gateway read into the split
	// (server_engine;desc=vllm), so that a client behind it knows whose
	// split it is (SplitServerTiming's Engine).
	TimingServerEngine TimingName = "server_engine"
)

// A decode instance's stages of a decode request in disaggregated prefill
// and decode (docs/metrics.md, "Disaggregated prefill and decode"): they
// take the place of server_queue and prefill, and sum with frontend and
// server_decode to its time on the request.
const (
	// TimingKVTransfer is the pull of the prompt's KV cache from the
	// prefill instance.
	TimingKVTransfer TimingName = "kv_transfer"
	// TimingDecodeQueue is the decode instance's wait: for KV blocks
	// before the pull, and for a step after it.
	TimingDecodeQueue TimingName = "decode_queue"
	// TimingFirstDecode is the decode instance's first step: the rest of
	// the prompt (its partial last block, or its last token), ending with
	// the first token.
	TimingFirstDecode TimingName = "first_decode"
)

// A tokentrace gateway's stages: they partition its time on the request
// (docs/metrics.md, "Gateway stages"), in path order, then the network
// part of the upstream's time to first token and the gateway's total.
const (
	TimingGatewayIn    TimingName = "gateway_in"    // parse, auth, length and limit policies, routing
	TimingGatewayQueue TimingName = "gateway_queue" // waiting in the gateway's queue for admission to the pool
	// TimingUpstreamPrefill is a disaggregated route's prefill half:
	// admission → the prefill instance's whole answer (its attempts,
	// connection, queue, prefill and transit), before the decode half.
	TimingUpstreamPrefill TimingName = "upstream_prefill"
	TimingConnect         TimingName = "connect"       // admission (or the prefill half's end) → connection to the replica that answered
	TimingUpstreamTTFT    TimingName = "upstream_ttft" // that connection → first content token read from upstream
	TimingDecode          TimingName = "decode"        // first token → end, less post-processing and backpressure
	TimingPostProcess     TimingName = "post_process"  // the gateway's own work on response events
	TimingBackpressure    TimingName = "backpressure"  // time blocked writing to the client
	// TimingNetwork is upstream_ttft − server_queue − prefill (− server_decode
	// for an answer sent whole): transit and the upstream's HTTP frontend.
	TimingNetwork TimingName = "network"
	// TimingTotal is the sum of the gateway's stages.
	TimingTotal TimingName = "total"
)

// GatewayStages lists the gateway's partitioning stages in path order.
var GatewayStages = []TimingName{TimingGatewayIn, TimingGatewayQueue, TimingUpstreamPrefill, TimingConnect, TimingUpstreamTTFT,
	TimingDecode, TimingPostProcess, TimingBackpressure}

// The prefill instance's stages of a disaggregated request, as the
// gateway passes them on under HopPrefill ("prefill.prefill_queue"): the
// prefill instance's own frontend, queue (its server_queue, renamed),
// prefill and server_decode, and the rest of the gateway's prefill half
// (PrefillNetwork).
const (
	// PrefillQueue is the prefill instance's queue wait.
	PrefillQueue = "prefill_queue"
	// PrefillNetwork is the prefill half less the prefill instance's
	// stages: connection, transit both ways, reading its answer, and any
	// failed attempts before it.
	PrefillNetwork = "network"
)

// timingFormerQueue is a former name, still read so that results of older
// servers and gateways parse: serve sent its queue as "queue" (and its
// decode as "decode"); a gateway sent its own queue as "queue".
const timingFormerQueue TimingName = "queue"

// ParseServerTiming reads Server-Timing values ("server_queue;dur=12.5,
// prefill;dur=40") into metric name → duration. Names are lower-cased;
// entries without a valid, non-negative dur (milliseconds) are skipped; a
// later value for a name replaces an earlier one, so a trailer overrides a
// header.
func ParseServerTiming(values []string) map[TimingName]time.Duration {
	out := make(map[TimingName]time.Duration, 4)
	for _, v := range values {
		scanTiming(v, func(e timingEntry) {
			if !e.hasDur {
				return
			}
			if ns, why := parseDur(e.dur); why == "" {
				out[TimingName(e.name)] = time.Duration(ns)
			}
		}, func(string, string) {})
	}
	return out
}

// timingEngine is the desc of the values' server_engine metric (a token
// of at most 32 bytes), "" without one.
func timingEngine(values []string) string {
	var engine string
	for _, v := range values {
		scanTiming(v, func(e timingEntry) {
			if TimingName(e.name) == TimingServerEngine && e.desc != "" && len(e.desc) <= 32 && scanToken(e.desc, 0) == len(e.desc) {
				engine = e.desc
			}
		}, func(string, string) {})
	}
	return engine
}

// SplitServerTiming reads a server's own split from its Server-Timing
// values: server_queue, prefill and server_decode. A tokentrace gateway on
// the path adds its own stages, whose sum is returned as gateway; its
// decode stage stands for the server's decode when the gateway did not
// pass server_decode on. The former names are read too: "queue" and
// "decode" from a server, "queue" as the gateway's own queue from a
// gateway (gateway_in present, gateway_queue absent). ok is false when
// neither a server queue nor prefill is present; when only one of them is
// (a gateway passing on the split of an engine that reports no queue wait,
// llama.cpp's, or no prefill apart from decode, TGI's), the other is
// listed in Unreported, not taken as 0.
func SplitServerTiming(values []string) (s ServerSplit, gateway time.Duration, ok bool) {
	m := ParseServerTiming(values)
	q, okq := m[TimingServerQueue]
	decode, okd := m[TimingServerDecode]
	if _, behind := m[TimingGatewayIn]; behind {
		gq, ok := m[TimingGatewayQueue]
		if !ok {
			gq = m[timingFormerQueue]
		}
		gateway = m[TimingGatewayIn] + gq + m[TimingConnect] + m[TimingPostProcess] + m[TimingBackpressure]
		if !okd {
			decode = m[TimingDecode]
		}
	} else {
		if !okq {
			q, okq = m[timingFormerQueue]
		}
		if !okd {
			decode = m[TimingDecode] // a server's former name for its decode
		}
	}
	p, okp := m[TimingPrefill]
	if !okq && !okp {
		return ServerSplit{}, gateway, false
	}
	sp := ServerSplit{QueueNS: int64(q), PrefillNS: int64(p), DecodeNS: int64(decode), Source: SourceServerTiming,
		Engine: timingEngine(values)}
	if !okq {
		sp.Unreported = append(sp.Unreported, SplitQueue)
	}
	if !okp {
		sp.Unreported = append(sp.Unreported, SplitPrefill)
	}
	return sp, gateway, true
}
