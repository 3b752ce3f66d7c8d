package serve

import (
	"net"
	"net/http"
	"strconv"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/openai"
)

// The roles of a server in disaggregated prefill and decode (Config.Role;
// docs/serve.md, "Disaggregated prefill and decode").
const (
	// RoleBoth serves whole requests, prefill requests and decode
	// requests (vLLM's kv_both).
	RoleBoth = "both"
	// RolePrefill serves whole requests and prefill requests
	// (kv_transfer_params.do_remote_decode), answering the latter with
	// where the decode side reads their KV cache; it refuses decode
	// requests.
	RolePrefill = "prefill"
	// RoleDecode serves whole requests and decode requests
	// (kv_transfer_params.do_remote_prefill), whose KV cache it pulls over
	// its KV link; it refuses prefill requests.
	RoleDecode = "decode"
)

func validRole(r string) error {
	switch r {
	case RoleBoth, RolePrefill, RoleDecode:
		return nil
	}
	return field.Invalid("role", r, "want both, prefill or decode")
}

// pdKind is what a request asks of a disaggregated deployment.
type pdKind uint8

const (
	pdWhole   pdKind = iota // an ordinary request
	pdPrefill               // compute the prompt, answer one token and where its KV lies
	pdDecode                // pull the prompt's KV, then decode
)

// checkKVTransfer reads the request's kv_transfer_params against the
// server's role.
func (s *Server) checkKVTransfer(x *exchange) *openai.APIError {
	p := x.p.KVTransfer
	switch {
	case p == nil || !p.DoRemoteDecode && !p.DoRemotePrefill:
		return nil
	case p.DoRemotePrefill:
		if s.cfg.Role == RolePrefill {
			return openai.BadRequest("kv_transfer_params.do_remote_prefill", "this server's role is prefill: it pulls no KV cache; send decode requests to a decode instance")
		}
		if err := p.CheckRemotePrefill(); err != nil {
			return err
		}
		bs := s.eng.Config().BlockSize
		if full := len(x.prompt) / bs; len(p.RemoteBlockIDs) != full {
			return openai.BadRequest("kv_transfer_params.remote_block_ids",
				"remote_block_ids lists %d blocks, but the prompt's %d tokens fill %d blocks of %d: the prefill instance computed another prompt, or has another block size",
				len(p.RemoteBlockIDs), len(x.prompt), full, bs)
		}
		x.pd = pdDecode
	default: // do_remote_decode
		if s.cfg.Role == RoleDecode {
			return openai.BadRequest("kv_transfer_params.do_remote_decode", "this server's role is decode: it computes no prompt for another instance; send prefill requests to a prefill instance")
		}
		if x.p.Stream {
			return openai.BadRequest("stream", "a prefill request (kv_transfer_params.do_remote_decode) is answered whole: set stream to false")
		}
		x.pd = pdPrefill
	}
	return nil
}

// kvTransferAnswer is a prefill request's kv_transfer_params: the prompt's
// full blocks (the partial last one is the decode side's to compute), the
// engine's id and the address the request came in on, as vLLM's
// NixlConnector answers once the one-token request ends by its length.
func (s *Server) kvTransferAnswer(r *http.Request, x *exchange) *openai.KVTransferParams {
	if x.pd != pdPrefill || x.tl.Finish != "length" {
		return nil
	}
	full := len(x.prompt) / s.eng.Config().BlockSize
	ids := make([]int64, full)
	first := s.blockSeq.Add(uint64(full)) - uint64(full)
	for i := range ids {
		ids[i] = int64(first) + int64(i)
	}
	engineID := "tokentrace-" + s.nonce
	out := &openai.KVTransferParams{DoRemotePrefill: true, RemoteEngineID: &engineID, RemoteBlockIDs: ids,
		RemoteRequestID: x.rid, TPSize: max(s.eng.Config().TP, 1)}
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if host, port, err := net.SplitHostPort(a.String()); err == nil {
			if n, err := strconv.ParseInt(port, 10, 64); err == nil {
				out.RemoteHost, out.RemotePort = &host, &n
			}
		}
	}
	return out
}

// remoteTP is a decode request's prefill instance's TP as its
// kv_transfer_params give it (tp_size; 0: not given, taken as this
// instance's).
func (x *exchange) remoteTP() int {
	if x.pd != pdDecode || x.p.KVTransfer == nil {
		return 0
	}
	return max(x.p.KVTransfer.TPSize, 0)
}
