package latency

// Stage names one contiguous part of a request's end-to-end latency.
// The stages of one request, summed, give its E2E latency measured from the
// intended send time (see docs/metrics.md, "Decomposition").
type Stage string

// The stages, in the order a request passes through them.
const (
	// StageClientQueue is the time between the instant the workload meant to
	// send the request and the instant the client actually began sending it.
	StageClientQueue Stage = "client_queue"
	// StageConnect is DNS, TCP and TLS set-up; zero on a reused connection.
	StageConnect Stage = "connect"
	// StageSend is writing the request headers and body.
	StageSend Stage = "send"
	// StageNetwork is time before the first token that the server does not
	// account for: network transit both ways, the HTTP frontend, tokenization
	// and any gateway in between. Without a server split it also holds the
	// server's own queue and prefill time (see StageUnattributed).
	StageNetwork Stage = "network"
	// StageGateway is time spent inside a tokentrace gateway (parse, auth,
	// policy, its own queue), when one is on the path.
	StageGateway Stage = "gateway"
	// StageServerQueue is the time the request waited in the server's
	// scheduler before its first prefill step.
	StageServerQueue Stage = "server_queue"
	// StagePrefill is the server's time from first scheduled to first token.
	StagePrefill Stage = "prefill"
	// StageDecode is the server's time from first token to last token.
	StageDecode Stage = "decode"
	// StageStreamTail is client-observed time after the first token that the
	// server's decode time does not cover: delivery of the last tokens,
	// post-processing and the end of the stream.
	StageStreamTail Stage = "stream_tail"
	// StagePostProcess is output post-processing (filters, detokenization)
	// where a server or gateway reports it separately.
	StagePostProcess Stage = "post_process"
	// StageUnattributed is time the client saw between sending and the first
	// token when the server gave no split of it.
	StageUnattributed Stage = "unattributed"
)

// Stages lists every stage in path order.
var Stages = []Stage{
	StageClientQueue, StageConnect, StageSend, StageGateway, StageNetwork,
	StageServerQueue, StagePrefill, StageDecode, StagePostProcess,
	StageStreamTail, StageUnattributed,
}
