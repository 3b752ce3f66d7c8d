package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/openai"
)

// A disaggregated route (RouteConfig.PrefillPool) is served in two halves,
// as vLLM's disaggregation proxy serves it (the protocol's fixtures:
// internal/openai/testdata/kvtransfer): the prefill half sends the
// request to a replica of the prefill pool with one output token, no
// stream and kv_transfer_params.do_remote_decode, and reads its whole
// answer; the decode half is the route's usual attempts (forward) with
// the request as the client sent it plus the prefill answer's
// kv_transfer_params. Each half's failures go through the attempt state
// machine (retries on other replicas of its pool, hedging; the prefill
// half has no fallback).

// pdStages are a disaggregated request's hops as the two instances
// reported them, for the metrics and the span.
type pdStages struct {
	prefillQueue, prefill, kvTransfer, decodeQueue, firstDecode time.Duration
	hasPrefill, hasDecode                                       bool
}

// foldDecode reads the decode instance's stages from its Server-Timing.
func (p *pdStages) foldDecode(header, trailer []string) {
	m := latency.ParseServerTiming(append(append([]string(nil), header...), trailer...))
	kv, ok := m[latency.TimingKVTransfer]
	if !ok {
		return
	}
	p.kvTransfer, p.decodeQueue, p.firstDecode, p.hasDecode = kv, m[latency.TimingDecodeQueue], m[latency.TimingFirstDecode], true
}

// prefillHalf runs the prefill half of a disaggregated route's request and
// sets x.body to the decode half's request. false when the client was
// answered (the prefill half failed).
func (x *exchange) prefillHalf(ctx context.Context) bool {
	body, err := prefillBody(x.body)
	if err != nil {
		x.fail(http.StatusBadRequest, openai.TypeInvalidRequest, err.Error(), "", "invalid_request", 0)
		return false
	}
	x.span.event("prefill")
	f := &x.att
	*f = attempts{x: x, ctx: ctx, route: x.route, pool: x.rt.pools[x.route.PrefillPool], body: body, admitted: x.tl.admitted, prefill: true}
	f.tried, f.running, f.bufs = f.triedBuf[:0], f.runningBuf[:0], f.bufsBuf[:0]
	defer f.stop()
	f.start()
	for st := waiting; ; {
		switch st {
		case waiting:
			st = f.wait()
		case retrying:
			x.span.event("retry")
			f.launch()
			st = waiting
		case streaming:
			return x.takePrefill(f.winner)
		default: // failed: a prefill half never falls back
			f.answerFailure()
			return false
		}
	}
}

// takePrefill reads the prefill instance's answer: its Server-Timing
// (passed on under latency.HopPrefill) and its kv_transfer_params, which
// the decode half's request carries. An answer without them (a server
// that does not speak the protocol) leaves the request as it was, as
// vLLM's proxy does: the decode instance then computes the prompt itself.
func (x *exchange) takePrefill(a *attempt) bool {
	g := x.g
	defer a.release()
	g.countAttempt(a.pool, "won")
	x.tl.prefilled = g.now()
	if !a.whole {
		g.countFault(a.pool, faultProtocol)
		x.fail(http.StatusBadGateway, openai.TypeServer, "the prefill instance streamed its answer to a prefill request (stream false)", "", "upstream_protocol_error", 0)
		return false
	}
	var ans struct {
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(a.body, &ans); err != nil {
		g.countFault(a.pool, faultProtocol)
		x.fail(http.StatusBadGateway, openai.TypeServer, protocolErrorMsg, "", "upstream_protocol_error", 0)
		return false
	}
	x.tl.prefillForward, x.tl.pd = prefillTiming(a.resp.Header.Values("Server-Timing"), a.resp.Trailer.Values("Server-Timing"),
		x.tl.prefilled.Sub(x.tl.admitted))
	if len(ans.KV) == 0 || string(ans.KV) == "null" {
		return true
	}
	body, err := rewriteFields(x.body, map[string]any{"kv_transfer_params": ans.KV})
	if err != nil {
		x.fail(http.StatusBadRequest, openai.TypeInvalidRequest, err.Error(), "", "invalid_request", 0)
		return false
	}
	x.body = body
	return true
}

// prefillBody is the prefill half's request: the client's with
// kv_transfer_params asking for a remote decode, one output token
// (max_completion_tokens too where the request has it), no stream, and
// stream_options, min_tokens and min_completion_tokens nulled where
// present (vLLM's example proxy removes them; null reads as absent).
func prefillBody(body []byte) ([]byte, error) {
	keys, err := topKeys(body)
	if err != nil {
		return nil, err
	}
	set := map[string]any{
		"kv_transfer_params": map[string]any{"do_remote_decode": true, "do_remote_prefill": false,
			"remote_engine_id": nil, "remote_block_ids": nil, "remote_host": nil, "remote_port": nil},
		"stream": false, "max_tokens": 1,
	}
	if keys["max_completion_tokens"] {
		set["max_completion_tokens"] = 1
	}
	for _, k := range [...]string{"stream_options", "min_tokens", "min_completion_tokens"} {
		if keys[k] {
			set[k] = nil
		}
	}
	return rewriteFields(body, set)
}

// topKeys lists a JSON object's top-level keys.
func topKeys(body []byte) (map[string]bool, error) {
	keys := map[string]bool{}
	s := newScanner(body)
	err := s.object(func(key []byte) error {
		keys[string(key)] = true
		return s.skip()
	})
	return keys, err
}

// prefillTiming is what the gateway passes on of the prefill instance's
// Server-Timing (header and trailer): its own stages under
// latency.HopPrefill, server_queue named latency.PrefillQueue, then
// latency.PrefillNetwork, the rest of the prefill half (half). A stage
// outside the instance's partition (server_reasoning) is left out.
func prefillTiming(header, trailer []string, half time.Duration) (string, pdStages) {
	stages, _ := latency.ParseTiming(latency.TimingValues{Header: header, Trailer: trailer})
	var b []byte
	var own time.Duration
	var pd pdStages
	for _, s := range stages {
		if s.Hop != latency.HopServer || latency.RoleOf(s.Hop, s.Name) != latency.RoleOwn {
			continue
		}
		name, d := s.Name, time.Duration(s.NS)
		switch latency.TimingName(name) {
		case latency.TimingServerQueue:
			name, pd.prefillQueue, pd.hasPrefill = latency.PrefillQueue, d, true
		case latency.TimingPrefill:
			pd.prefill, pd.hasPrefill = d, true
		}
		b = latency.AppendTiming(b, latency.Qualify(latency.HopPrefill, name), s.NS)
		own += d
	}
	b = latency.AppendTiming(b, latency.Qualify(latency.HopPrefill, latency.PrefillNetwork), int64(max(half-own, 0)))
	return string(b), pd
}
