package gateway

import (
	"io"
	"strconv"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// The gateway's stages of one request are latency's gateway timing names
// (latency.GatewayStages, in path order): they partition the request's
// time inside the gateway, from the handler's first instruction to the
// last byte written, so they sum exactly to the gateway-observed E2E
// (docs/metrics.md, "Gateway stages"). When the upstream reports its own
// queue and prefill time, upstream_ttft is split into latency's
// TimingServerQueue + TimingPrefill + TimingNetwork.

// timeline holds one request's instants and accumulated durations. Instants
// are from the gateway's clock (monotonic with time.Now).
type timeline struct {
	// post and backpressure are the stage clocks a stream adds to on every
	// event: first, so that they share a cache line with the exchange's
	// eventState (exchange).
	post, backpressure time.Duration

	start    time.Time // handler entered
	in       time.Time // policies done, queued
	admitted time.Time // admitted to the pool
	// prefilled is when a disaggregated route's prefill half ended (the
	// prefill instance's answer read); zero on other routes.
	prefilled time.Time
	conn      time.Time // winning attempt connected
	firstTok  time.Time // first content token read from upstream
	end       time.Time // last byte written

	// upstream split, from its Server-Timing trailer; ok reports presence.
	serverQueue, serverPrefill, serverDecode time.Duration
	serverSplit                              bool
	// unreported lists the server stages the upstream's evidence does
	// not give (latency.ServerSplit.Unreported): llama.cpp's queue wait,
	// TGI's prefill apart from its decode.
	unreported []string
	// fromEvidence: the split came from the engine's own per-request
	// evidence (useEngineSplit), not from a Server-Timing.
	fromEvidence bool
	// splitForwarded: the split came from the upstream's Server-Timing,
	// whose stages are passed on (forward), so the trailer does not repeat
	// them.
	splitForwarded bool
	// engine names the engine whose evidence gave the split
	// (server_engine;desc=…): an index into evidenceEngines, 0 when it does
	// not say (a byte, in the bools' padding: the exchange's layout holds).
	engine uint8
	// forward is the upstream's stages (latency.ForwardTiming), passed on
	// after the gateway's own in the trailer; prefillForward, on a
	// disaggregated route, the prefill instance's (under
	// latency.HopPrefill), passed on before them.
	forward, prefillForward string
	// pd holds a disaggregated request's hops for the metrics and span.
	pd pdStages
	// whole: the answer was one body (not streamed), so upstream_ttft
	// spans the server's decode too.
	whole bool
}

// waitReader is the upstream's body, timed: waited is the total time
// spent in its Read, waiting for the upstream's bytes (and the transport
// decoding them). The rest of the time the gateway spends reading events
// (splitting them from the buffer, copying) is its own work:
// post_process, not decode. Its readings are g's monotonic ones
// (Gateway.sinceBase), called directly.
type waitReader struct {
	r      io.Reader
	g      *Gateway
	waited time.Duration
}

func (w *waitReader) Read(p []byte) (int, error) {
	t0 := w.g.sinceBase()
	n, err := w.r.Read(p)
	w.waited += w.g.sinceBase() - t0
	return n, err
}

// stageDurations are the partitioning stages of one request.
type stageDurations struct {
	In, Queue, UpstreamPrefill, Connect, UpstreamTTFT, Decode, Post, Backpressure time.Duration
}

// stages computes the partition. Instants not reached (a request rejected in
// the queue) collapse to the last one reached, so the sum is always
// end − start.
func (t *timeline) stages() stageDurations {
	var buf [6]time.Duration // on the stack: stages runs several times a request
	d := latency.AppendConsecutive(buf[:0], t.start, t.in, t.admitted, t.prefilled, t.conn, t.firstTok, t.end)
	s := stageDurations{In: d[0], Queue: d[1], UpstreamPrefill: d[2], Connect: d[3], UpstreamTTFT: d[4]}
	tail := d[5]
	s.Post, s.Backpressure = t.post, t.backpressure
	if s.Post+s.Backpressure > tail {
		// Time spent before the first token (writing the first events) is
		// counted in the tail stages; keep the partition exact.
		over := s.Post + s.Backpressure - tail
		if s.Post >= over {
			s.Post -= over
		} else {
			s.Backpressure -= over - s.Post
			s.Post = 0
		}
	}
	s.Decode = tail - s.Post - s.Backpressure
	return s
}

// sum is the total of the partition: end − start.
func (s stageDurations) sum() time.Duration {
	return s.In + s.Queue + s.UpstreamPrefill + s.Connect + s.UpstreamTTFT + s.Decode + s.Post + s.Backpressure
}

// split divides upstream TTFT with the upstream's own queue and prefill
// times (and decode, for an answer sent whole), as far as its evidence
// reports them (upstreamSplit); network is the remainder, known only when
// nothing in upstream_ttft is unreported (never negative: clocks of two
// processes can disagree by a little, the excess is clamped). ok is false
// when the upstream gave no split.
func (t *timeline) split(upstreamTTFT time.Duration) (s upstreamSplit, ok bool) {
	if !t.serverSplit {
		return upstreamSplit{}, false
	}
	s.hasQueue, s.hasPrefill = t.reports(latency.SplitQueue), t.reports(latency.SplitPrefill)
	if s.hasQueue {
		s.queue = t.serverQueue
	}
	if s.hasPrefill {
		s.prefill = t.serverPrefill
	}
	// An answer sent whole spans the server's decode too, which holds
	// the prefill an engine does not report apart (TGI's inference time).
	s.hasNetwork = s.hasQueue && s.hasPrefill
	if t.whole {
		s.hasNetwork = s.hasQueue && t.reports(latency.SplitDecode)
	}
	if s.hasNetwork {
		s.network = upstreamTTFT - s.queue - s.prefill
		if t.whole {
			s.network -= t.serverDecode
		}
		s.network = max(s.network, 0)
	}
	return s, true
}

// appendTiming appends a Server-Timing metric "name;dur=ms" (milliseconds,
// three decimals, as the W3C Server Timing spec uses).
func appendTiming(b []byte, name latency.TimingName, d time.Duration) []byte {
	if len(b) > 0 {
		b = append(b, ", "...)
	}
	b = append(b, name...)
	b = append(b, ";dur="...)
	return strconv.AppendFloat(b, float64(d)/1e6, 'f', 3, 64)
}

// timingBuf holds a Server-Timing value of the usual stages without
// growing (a longer one grows on the heap).
const timingBuf = 256

// headerTiming is the Server-Timing header sent with the response headers:
// the stages known before the first byte.
func headerTiming(s stageDurations) string {
	var buf [timingBuf]byte // on the stack: one allocation, the string
	b := buf[:0]
	b = appendTiming(b, latency.TimingGatewayIn, s.In)
	b = appendTiming(b, latency.TimingGatewayQueue, s.Queue)
	if s.UpstreamPrefill > 0 {
		b = appendTiming(b, latency.TimingUpstreamPrefill, s.UpstreamPrefill)
	}
	b = appendTiming(b, latency.TimingConnect, s.Connect)
	b = appendTiming(b, latency.TimingUpstreamTTFT, s.UpstreamTTFT)
	return string(b)
}

// trailerTiming is the Server-Timing trailer (and final SSE comment): the
// stages after the first byte, the upstream split when known, and the total.
func (t *timeline) trailerTiming(s stageDurations) string {
	var buf [timingBuf]byte
	return string(t.appendTrailerTiming(buf[:0], s, ""))
}

// appendTrailerTiming appends trailerTiming's value to b, with inner (a
// hop's stages passed on, the prefill instance's) before the upstream
// split, so that hop comes before the server in path order.
func (t *timeline) appendTrailerTiming(b []byte, s stageDurations, inner string) []byte {
	b = appendTiming(b, latency.TimingDecode, s.Decode)
	b = appendTiming(b, latency.TimingPostProcess, s.Post)
	b = appendTiming(b, latency.TimingBackpressure, s.Backpressure)
	if inner != "" {
		b = append(b, ", "...)
		b = append(b, inner...)
	}
	if sp, ok := t.split(s.UpstreamTTFT); ok {
		if !t.splitForwarded && sp.hasQueue {
			b = appendTiming(b, latency.TimingServerQueue, sp.queue)
		}
		if !t.splitForwarded && sp.hasPrefill {
			b = appendTiming(b, latency.TimingPrefill, sp.prefill)
		}
		if sp.hasNetwork {
			b = appendTiming(b, latency.TimingNetwork, sp.network)
		}
		// The engine's decode, from its own evidence: inside upstream_ttft
		// for a whole answer, inside the gateway's decode for a stream
		// (llama.cpp's predicted_ms, vLLM's generation_time_ms), so that a
		// client's path gives it to the server, not to the link.
		if !t.splitForwarded && t.reports(latency.SplitDecode) && (t.whole || t.fromEvidence) {
			b = appendTiming(b, latency.TimingServerDecode, t.serverDecode)
		}
		if t.fromEvidence && t.engine != 0 {
			b = append(append(append(append(b, ", "...), latency.TimingServerEngine...), ";desc="...), evidenceEngines[t.engine]...)
		}
	}
	return appendTiming(b, latency.TimingTotal, s.sum())
}

// finalTiming is what the trailer and the final SSE comment carry: the
// gateway's own trailer stages, then the upstream's stages passed on, so a
// client sees every hop's stages, outermost first (docs/metrics.md, "Hops
// and the decomposition along the path").
func (t *timeline) finalTiming(s stageDurations) string {
	var buf [timingBuf]byte
	return string(t.appendFinalTiming(buf[:0], s))
}

// appendFinalTiming appends finalTiming's value to b.
func (t *timeline) appendFinalTiming(b []byte, s stageDurations) []byte {
	b = t.appendTrailerTiming(b, s, t.prefillForward)
	if t.forward != "" {
		b = append(b, ", "...)
		b = append(b, t.forward...)
	}
	return b
}

// foldServerTiming records the upstream's split from its Server-Timing
// header and trailer values (latency.SplitServerTiming: server_queue,
// prefill, server_decode, and their former names), and keeps every stage
// of the upstream's to pass on.
func (t *timeline) foldServerTiming(header, trailer []string) {
	if len(header) == 0 && len(trailer) == 0 {
		t.forward = "" // nothing to pass on, no split: the parse's map is not made
		return
	}
	t.forward = latency.ForwardTiming(latency.HopGateway, latency.TimingValues{Header: header, Trailer: trailer})
	if !t.prefilled.IsZero() {
		t.pd.foldDecode(header, trailer)
		if t.pd.hasDecode {
			// The decode instance's stages, passed on, are its split: an
			// engine's metrics object must not add a second one.
			t.serverSplit, t.fromEvidence, t.splitForwarded = false, false, true
			return
		}
	}
	sp, _, ok := latency.SplitServerTiming(append(append([]string(nil), header...), trailer...))
	if !ok {
		return
	}
	t.serverQueue, t.serverPrefill, t.serverDecode, t.serverSplit = time.Duration(sp.QueueNS), time.Duration(sp.PrefillNS), time.Duration(sp.DecodeNS), true
	t.splitForwarded = true
}
