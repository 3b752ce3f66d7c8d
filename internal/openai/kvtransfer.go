package openai

import "fmt"

// KVTransferParams is vLLM's "kv_transfer_params", the field through which
// a disaggregation proxy drives a prefill instance and a decode instance
// (docs/serve.md, "Disaggregated prefill and decode"). The proxy sends a
// prefill request with DoRemoteDecode set and the remote fields null, one
// output token and no stream; the prefill instance answers with
// DoRemotePrefill set and where its KV blocks lie; the proxy sends the
// original request to a decode instance with those parameters. Field names
// and meanings as vLLM's NixlConnector fills them
// (vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py,
// request_finished) and its example proxy sends them
// (tests/v1/kv_connector/nixl_integration/toy_proxy_server.py, vllm-project/vllm
// at 030ea52e).
type KVTransferParams struct {
	DoRemoteDecode  bool `json:"do_remote_decode"`
	DoRemotePrefill bool `json:"do_remote_prefill"`
	// RemoteEngineID names the prefill instance's engine; RemoteHost and
	// RemotePort its side channel, from which the decode side reads the
	// blocks; RemoteBlockIDs the prefill instance's blocks holding the
	// prompt's full blocks. Null in a prefill request.
	RemoteEngineID *string `json:"remote_engine_id"`
	RemoteBlockIDs []int64 `json:"remote_block_ids"`
	RemoteHost     *string `json:"remote_host"`
	RemotePort     *int64  `json:"remote_port"`
	// RemoteRequestID is the prefill instance's request id (newer vLLM
	// sends it); TPSize its tensor-parallel size.
	RemoteRequestID string `json:"remote_request_id,omitempty"`
	TPSize          int    `json:"tp_size,omitempty"`
}

// CheckRemotePrefill says which field a decode request's parameters lack:
// a decode instance needs the prefill instance's engine id, host, port and
// block list.
func (p *KVTransferParams) CheckRemotePrefill() *APIError {
	switch {
	case p.RemoteEngineID == nil || *p.RemoteEngineID == "":
		return BadRequest("kv_transfer_params.remote_engine_id", "a remote prefill needs remote_engine_id")
	case p.RemoteHost == nil || *p.RemoteHost == "":
		return BadRequest("kv_transfer_params.remote_host", "a remote prefill needs remote_host")
	case p.RemotePort == nil || *p.RemotePort < 1 || *p.RemotePort > 65535:
		return BadRequest("kv_transfer_params.remote_port", "a remote prefill needs remote_port in 1..65535")
	case p.RemoteBlockIDs == nil:
		return BadRequest("kv_transfer_params.remote_block_ids", "a remote prefill needs remote_block_ids (an array, empty when the prompt fills no block)")
	case p.DoRemoteDecode:
		return BadRequest("kv_transfer_params", "do_remote_prefill and do_remote_decode are both set")
	}
	for i, b := range p.RemoteBlockIDs {
		if b < 0 {
			return BadRequest("kv_transfer_params.remote_block_ids", "%s", fmt.Sprintf("block id %d at position %d is negative", b, i))
		}
	}
	return nil
}
