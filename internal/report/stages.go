package report

import "github.com/tokentrace/tokentrace/internal/latency"

// stageOrder lists the stages of the per-stage distributions and the CSV's
// fixed columns (docs/metrics.md, "Per-stage distributions"); the
// decomposition is the path's (paths.go).
var stageOrder = []latency.Stage{
	latency.StageClientQueue, latency.StageConnect, latency.StageSend, latency.StageGateway,
	latency.StageNetwork, latency.StageServerQueue, latency.StagePrefill, latency.StageDecode,
	latency.StageStreamTail, latency.StageUnattributed,
}

const (
	stCQ = iota
	stConnect
	stSend
	stGateway
	stNetwork
	stSQ
	stPrefill
	stDecode
	stTail
	stUnattr
	nStages
)

// firstOut is the instant the first of the answer reached the client: the
// first token, or the end for an answer that came whole.
func (r *row) firstOut() int64 {
	if r.firstTok == 0 {
		return r.end
	}
	return r.firstTok
}

// stages splits a successful request's E2E from the intended send into
// stageOrder; the parts sum exactly to end − intended (docs/metrics.md,
// "Decomposition formulas").
func (r *row) stages() (s [nStages]int64) {
	s[stCQ] = r.sent - r.intended
	s[stConnect] = r.connect
	wrote, pre := r.beforeFirst()
	s[stSend] = wrote - r.sent - r.connect
	s[stGateway] = r.gateway
	first := r.firstOut()
	switch {
	case r.flags&flagQueueInferred != 0:
		// The engine's queue wait is inferred (analysis.inferQueue); what
		// every request pays before it — HTTP, templating, tokenization,
		// the network — is not known apart: unattributed, never network.
		s[stSQ], s[stPrefill], s[stDecode] = r.sq, r.prefill, r.decode
		s[stUnattr] = pre - r.sq - r.prefill
		if r.firstTok == 0 {
			s[stUnattr] -= r.decode // a whole answer: decode came before its end
		} else {
			s[stDecode] = min(r.decode, max(r.end-first, 0))
			s[stTail] = r.end - first - s[stDecode]
		}
	case r.hasServer():
		// A server split over the client's own time (clocks that disagree)
		// leaves network 0, the excess taken off the queue, then prefill.
		over := r.serverOverrun()
		cut := min(over, r.sq)
		s[stSQ], s[stPrefill] = r.sq-cut, r.prefill-(over-cut)
		s[stNetwork] = pre - s[stSQ] - s[stPrefill]
		// The stream tail is never negative: a server decode longer than
		// the client's end − first (its own clock) is taken as end − first.
		s[stDecode] = min(r.decode, max(r.end-first, 0))
		s[stTail] = r.end - first - s[stDecode]
	default:
		s[stUnattr] = pre
		s[stDecode] = r.end - first
	}
	return s
}

// beforeFirst is the instant the request was written and the time from
// then, less the gateway's, to the first of the answer.
func (r *row) beforeFirst() (wrote, pre int64) {
	wrote = r.wrote
	if wrote == 0 {
		wrote = r.sent + r.connect
	}
	return wrote, r.firstOut() - wrote - r.gateway
}

// serverOverrun is how much a server's queue and prefill exceed the time
// the client saw before the first token (0 when they do not, or when the
// server's split does not give network): the two clocks disagree.
func (r *row) serverOverrun() int64 {
	if !r.hasServer() || r.flags&flagQueueInferred != 0 {
		return 0
	}
	_, pre := r.beforeFirst()
	return max(r.sq+r.prefill-pre, 0)
}

// stageApplies says whether a stage is measured for a request: the server's
// stages (and network, stream tail) need its split; unattributed needs its absence.
func stageApplies(r *row, st int) bool {
	switch st {
	case stSQ, stPrefill, stTail:
		return r.hasServer()
	case stNetwork:
		return r.hasServer() && r.flags&flagQueueInferred == 0
	case stUnattr:
		return !r.hasServer() || r.flags&flagQueueInferred != 0
	case stGateway:
		return r.gateway > 0
	}
	return true
}
