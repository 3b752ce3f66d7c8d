package whatif

import (
	"fmt"

	"github.com/tokentrace/tokentrace/internal/capacity"
)

// applied is a remedy's change as `tokentrace verify --applied` reads it:
// the setting's own name (vLLM's, the deployment's) and its new value in
// d; "" for a lever verify does not name.
func applied(lever string, d capacity.Deployment) string {
	e := d.Engine
	switch lever {
	case "prefix-caching":
		return fmt.Sprintf("enable_prefix_caching=%v", e.EnablePrefixCaching)
	case "chunked-prefill":
		return fmt.Sprintf("enable_chunked_prefill=%v", e.EnableChunkedPrefill)
	case "token-budget":
		return fmt.Sprintf("max_num_batched_tokens=%d", e.MaxNumBatchedTokens)
	case "max-num-seqs":
		return fmt.Sprintf("max_num_seqs=%d", e.MaxNumSeqs)
	case "max-tokens-cap":
		return fmt.Sprintf("max_max_tokens=%d", d.MaxMaxTokens)
	case "weights":
		return "dtype=" + e.DType
	case "kv-cache-dtype":
		return "cache_dtype=" + e.KVCacheDType
	case "speculative-decoding":
		return fmt.Sprintf("speculative_k=%d", e.SpeculativeK)
	case "tensor-parallel":
		return fmt.Sprintf("tensor_parallel_size=%d", e.TensorParallelSize)
	case "replicas", "replicas-needed":
		return fmt.Sprintf("replicas=%d", d.Replicas)
	case "priority-scheduling":
		return "scheduling_policy=" + e.SchedulingPolicy
	case "admission-control":
		return fmt.Sprintf("max_waiting=%d", e.MaxWaiting)
	}
	return ""
}

// gatewayApplied is a remedy as `tokentrace gateway apply` writes it
// into a gateway's configuration, for the levers a gateway can apply in
// front of d's replicas; "" for the others. Admission control at most n
// waiting is the gateway's limit of every slot of every replica running
// (max_num_seqs × replicas) and n per replica waiting, which verify folds
// back into the same engines.
func gatewayApplied(lever string, d capacity.Deployment) string {
	switch lever {
	case "admission-control":
		ec, _, err := d.Engine.Config()
		if err != nil {
			return ""
		}
		r := max(d.Replicas, 1)
		return fmt.Sprintf("concurrency=%d max-queue=%d", ec.WithDefaults().MaxNumSeqs*r, d.Engine.MaxWaiting*r)
	case "max-tokens-cap":
		return fmt.Sprintf("max-max-tokens=%d", d.MaxMaxTokens)
	}
	return ""
}
