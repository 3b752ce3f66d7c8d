package latency

import "strings"

// Hop names a component on a request's path that reports its own stages:
// the client, then each server the request crosses (an application in front
// of the model, a gateway, the inference server). A Server-Timing entry
// belongs to one hop: a name "HOP.STAGE" names its hop (app.retrieval), and
// the unqualified names of latency's vocabulary belong to the gateway
// (gateway_in, …) or to the inference server (server_queue, …); any other
// unqualified name is the inference server's (docs/metrics.md, "Hops").
type Hop string

// The hops tokentrace knows by name. Any other hop named in a qualified
// Server-Timing entry is read the same way.
const (
	// HopClient is the load generator: its queue, connection and send.
	HopClient Hop = "client"
	// HopApp is an application in front of the model (tokentrace app: a
	// RAG service with guardrails).
	HopApp Hop = "app"
	// HopGateway is a tokentrace gateway.
	HopGateway Hop = "gateway"
	// HopServer is the inference server (tokentrace serve, vLLM, …); in
	// disaggregated prefill and decode, the decode instance.
	HopServer Hop = "server"
	// HopPrefill is a disaggregated deployment's prefill instance, whose
	// stages the gateway (the router) passes on qualified
	// ("prefill.prefill_queue"; docs/metrics.md, "Disaggregated prefill and
	// decode").
	HopPrefill Hop = "prefill"
)

// An application's stages (tokentrace app sends them, qualified by its hop:
// "app.retrieval;dur=12.5"). They partition its time on a request, from the
// handler's first instruction to the last byte written, in path order
// (docs/metrics.md, "Application stages"). Streamed answers interleave
// upstream, guardrail, post_process and backpressure; each is the sum of
// its intervals.
const (
	// TimingAppIn is reading, decoding and validating the request.
	TimingAppIn TimingName = "app.in"
	// TimingAppRetrieval is the retrieval calls (vector search over every
	// source, sequential or parallel), wall time.
	TimingAppRetrieval TimingName = "app.retrieval"
	// TimingAppRerank is scoring and ordering the retrieved passages.
	TimingAppRerank TimingName = "app.rerank"
	// TimingAppPrompt is assembling the prompt from the question and the
	// passages.
	TimingAppPrompt TimingName = "app.prompt"
	// TimingAppUpstream is time waiting on the model's server (directly or
	// through a gateway): connection, its answer's headers, each read of
	// its body. It encloses the next hop's time.
	TimingAppUpstream TimingName = "app.upstream"
	// TimingAppGuardrail is output checking: safety filters and the
	// configured per-token check cost.
	TimingAppGuardrail TimingName = "app.guardrail"
	// TimingAppPostProcess is the application's own work on the answer:
	// parsing the upstream's events and writing its own.
	TimingAppPostProcess TimingName = "app.post_process"
	// TimingAppBackpressure is time blocked writing to the client.
	TimingAppBackpressure TimingName = "app.backpressure"
	// TimingAppTotal is the sum of the application's stages.
	TimingAppTotal TimingName = "app.total"
)

// AppStages lists the application's partitioning stages in path order.
var AppStages = []TimingName{TimingAppIn, TimingAppRetrieval, TimingAppRerank, TimingAppPrompt,
	TimingAppUpstream, TimingAppGuardrail, TimingAppPostProcess, TimingAppBackpressure}

// TimingRole says how a hop's reported stage relates to its other stages.
type TimingRole int

// The roles. A hop's own stages and its upstream stages partition its
// total; the upstream stages enclose the next hop's whole time.
const (
	// RoleOwn is the hop's own work (a leaf of the decomposition).
	RoleOwn TimingRole = iota
	// RoleUpstream is time the hop waited on the next hop.
	RoleUpstream
	// RoleTotal is the hop's whole time on the request.
	RoleTotal
	// RoleInfo is a figure the hop derived or copied, outside its
	// partition (the gateway's network estimate).
	RoleInfo
)

// FinalTimingComment starts the SSE comment line that a tokentrace hop
// writes before a stream's [DONE]: ": server-timing VALUE", VALUE being
// what its Server-Timing trailer carries, for clients that cannot read
// trailers.
const FinalTimingComment = "server-timing "

// Qualify is the Server-Timing name of stage of hop: "hop.stage".
func Qualify(hop Hop, stage string) TimingName { return TimingName(string(hop) + "." + stage) }

// Split is the hop and stage a Server-Timing name stands for: a qualified
// name's prefix and rest; an unqualified name of latency's vocabulary its
// gateway or server hop; any other unqualified name the server's.
func (n TimingName) Split() (Hop, string) {
	if h, s, ok := strings.Cut(string(n), "."); ok && h != "" && s != "" {
		return Hop(h), s
	}
	if gatewayNames[n] {
		return HopGateway, string(n)
	}
	return HopServer, string(n)
}

// gatewayNames are the gateway's unqualified names.
var gatewayNames = map[TimingName]bool{
	TimingGatewayIn: true, TimingGatewayQueue: true, TimingUpstreamPrefill: true, TimingConnect: true, TimingUpstreamTTFT: true,
	TimingDecode: true, TimingPostProcess: true, TimingBackpressure: true, TimingNetwork: true, TimingTotal: true,
}

// RoleOf is the role of a hop's stage: for the gateway, upstream_ttft and
// decode are its upstream time, total its total and network derived; for
// the server, server_reasoning is a part of its decode, reported beside
// it; for any other hop, "total" is the total, "upstream" or a name
// starting "upstream_" upstream time, and everything else its own work.
func RoleOf(hop Hop, stage string) TimingRole {
	if hop == HopGateway {
		switch TimingName(stage) {
		case TimingUpstreamTTFT, TimingDecode, TimingUpstreamPrefill:
			return RoleUpstream
		case TimingTotal:
			return RoleTotal
		case TimingNetwork:
			return RoleInfo
		}
		return RoleOwn
	}
	switch {
	case hop == HopServer && TimingName(stage) == TimingServerReasoning:
		return RoleInfo
	case stage == "total":
		return RoleTotal
	case stage == "upstream", strings.HasPrefix(stage, "upstream_"):
		return RoleUpstream
	}
	return RoleOwn
}
