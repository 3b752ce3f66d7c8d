package report

import (
	"fmt"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// The parts of a disaggregated request's path that the P/D rules read
// (docs/metrics.md, "Disaggregated prefill and decode"): the prefill
// instance's queue, the decode instance's KV pull and its wait.
var (
	partPrefillQueue = StageShare{Hop: string(latency.HopPrefill), Stage: latency.PrefillQueue}
	partKVTransfer   = StageShare{Hop: string(latency.HopServer), Stage: string(latency.TimingKVTransfer)}
	partDecodeQueue  = StageShare{Hop: string(latency.HopServer), Stage: string(latency.TimingDecodeQueue)}
)

// Thresholds of the P/D rules (docs/report.md, "Disaggregated prefill and
// decode").
const (
	// minPDQueueShare is the share of TTFT's tail at or above which a
	// pool's queue, the tail's largest term, is the finding.
	minPDQueueShare = 0.3
	// minTransferShare is the share of TTFT's tail at or above which the
	// KV transfer is the finding (it need not be the largest term).
	minTransferShare = 0.2
	// starvedRatio is how many times one side's wait must exceed the
	// other's for the P:D ratio to be named as the cause.
	starvedRatio = 4
)

// shareOf is part p's mean and share in group g (zero when absent).
func (g *StageGroup) shareOf(p StageShare) StageShare {
	for _, s := range g.Stages {
		if s.Hop == p.Hop && s.Stage == p.Stage {
			return s
		}
	}
	return StageShare{Hop: p.Hop, Stage: p.Stage}
}

// pdTail is TTFT's tail of a disaggregated run: nil when the run has no
// prefill hop.
func (a *analysis) pdTail(rep *Report) (*StageGroup, string, bool) {
	why, ok := concern(rep, latency.TTFT, latency.TTFTIntended)
	if !ok || len(a.ok) < 8 {
		return nil, "", false
	}
	tail := a.ttftTail(rep)
	if tail == nil {
		return nil, "", false
	}
	for _, s := range tail.Stages {
		if s.Hop == string(latency.HopPrefill) {
			return tail, why, true
		}
	}
	return nil, "", false
}

// rulePDTransfer: TTFT's tail holds a KV transfer of at least
// minTransferShare — bytes ÷ link. The fit of the transfer on the
// prompt's length gives its cost per 1k tokens (a link's bandwidth seen
// through the model's KV bytes per token).
func rulePDTransfer(a *analysis, rep *Report) (Finding, bool) {
	tail, why, ok := a.pdTail(rep)
	if !ok {
		return Finding{}, false
	}
	kv := tail.shareOf(partKVTransfer)
	if kv.Share < minTransferShare {
		return Finding{}, false
	}
	nums := map[string]float64{"kv_transfer_share_tail": kv.Share, "kv_transfer_tail_ms": kv.MeanMS}
	ev := fmt.Sprintf("%sThe KV cache's transfer from the prefill instance to the decode instance is %.0f%% of TTFT %s "+
		"(mean %s of %s): TTFT is bound by the bytes moved over the link.", prefix(why), 100*kv.Share, tailWords(tail),
		fmtMS(kv.MeanMS), fmtMS(tail.TotalMS))
	if f, ok := a.partFit(partKVTransfer); ok && f.Slope > 0 && f.R2 >= 0.3 {
		nums["kv_transfer_ms_per_1k_input"] = 1000 * f.Slope
		ev += fmt.Sprintf(" It grows with the prompt: %.2f ms per 1k input tokens (R² %.2f, %d requests); at 128 KiB of "+
			"KV per token (Llama-3.1-8B, bf16) that is %.3g GB/s.", 1000*f.Slope, f.R2, f.N, 131072*1000/(1000*f.Slope)/1e6)
	}
	return Finding{Severity: SeverityWarning, Title: "TTFT is bound by the KV transfer between prefill and decode",
		Evidence: ev, Numbers: nums, Remedies: []string{
			"a faster link between the pools: NVLink within a node, RDMA (GPUDirect) between nodes, not TCP",
			"fewer bytes per token: an FP8 KV cache (kv_cache_dtype fp8) halves the transfer",
			"prefix caching on the decode side: blocks it holds are not pulled again",
			"aggregated serving (no transfer) when the transfer costs more than the prefill interference it removes",
		}}, true
}

// rulePDPrefillQueue: the prefill instances' queue is TTFT's tail's
// largest term — too few prefill instances for the prompts, or a P:D
// ratio that starves the prefill side.
func rulePDPrefillQueue(a *analysis, rep *Report) (Finding, bool) {
	tail, why, ok := a.pdTail(rep)
	if !ok {
		return Finding{}, false
	}
	q := tail.shareOf(partPrefillQueue)
	if q.Share < minPDQueueShare || tail.Largest != q.Stage || tail.LargestHop != q.Hop {
		return Finding{}, false
	}
	d := tail.shareOf(partDecodeQueue)
	nums := map[string]float64{"prefill_queue_share_tail": q.Share, "prefill_queue_tail_ms": q.MeanMS, "decode_queue_tail_ms": d.MeanMS}
	ev := fmt.Sprintf("%sThe prefill pool's queue is the largest term of TTFT %s: %.0f%% (mean %s of %s); the decode "+
		"pool's queue is %s.", prefix(why), tailWords(tail), 100*q.Share, fmtMS(q.MeanMS), fmtMS(tail.TotalMS), fmtMS(d.MeanMS))
	title := "Requests queue for the prefill pool"
	if q.MeanMS >= starvedRatio*d.MeanMS {
		title += ": the P:D ratio starves the prefill side"
		ev += " The prefill side waits far longer than the decode side: the pools are sized the wrong way round for these prompts."
	}
	return Finding{Severity: SeverityWarning, Title: title, Evidence: ev, Numbers: nums, Remedies: []string{
		"more prefill instances: raise the P:D ratio (move instances from the decode pool when its queue is short)",
		"a larger prefill token budget per step (max_num_batched_tokens) on the prefill instances, or chunked prefill off there",
		"prefix caching on the prefill side, so shared prompt prefixes are computed once",
		"aggregated serving when the decode side sits idle: every instance then prefills",
	}}, true
}

// rulePDDecodeQueue: the decode instances' wait (for KV blocks before
// the pull, for a step after it) is TTFT's tail's largest term — KV
// pressure or the batch limit on the decode pool, or a P:D ratio that
// starves the decode side.
func rulePDDecodeQueue(a *analysis, rep *Report) (Finding, bool) {
	tail, why, ok := a.pdTail(rep)
	if !ok {
		return Finding{}, false
	}
	d := tail.shareOf(partDecodeQueue)
	if d.Share < minPDQueueShare || tail.Largest != d.Stage || tail.LargestHop != d.Hop {
		return Finding{}, false
	}
	q := tail.shareOf(partPrefillQueue)
	nums := map[string]float64{"decode_queue_share_tail": d.Share, "decode_queue_tail_ms": d.MeanMS, "prefill_queue_tail_ms": q.MeanMS}
	ev := fmt.Sprintf("%sThe decode pool's wait (for KV blocks before the transfer, then for a step) is the largest term of "+
		"TTFT %s: %.0f%% (mean %s of %s); the prefill pool's queue is %s.", prefix(why), tailWords(tail), 100*d.Share,
		fmtMS(d.MeanMS), fmtMS(tail.TotalMS), fmtMS(q.MeanMS))
	if a.ev.has("kv_cache_usage") {
		nums["kv_cache_usage_peak"] = a.ev.kvPeak
		ev += fmt.Sprintf(" KV-cache usage peaked at %.0f%% (its /metrics).", 100*a.ev.kvPeak)
	}
	title := "Requests wait for the decode pool: KV pressure or its batch limit"
	if d.MeanMS >= starvedRatio*q.MeanMS {
		title += "; the P:D ratio starves the decode side"
	}
	return Finding{Severity: SeverityWarning, Title: title, Evidence: ev, Numbers: nums, Remedies: append([]string{
		"more decode instances: lower the P:D ratio (move instances from the prefill pool when its queue is short)",
	}, a.kvRemedies()...)}, true
}

// partFit fits part p's TTFT value on the input length.
func (a *analysis) partFit(p StageShare) (fit, bool) {
	k, ok := a.paths.index[partKey{p.Hop, p.Stage}]
	if !ok {
		return fit{}, false
	}
	var xs, ys []float64
	for _, i := range a.ok {
		w := &a.rows[i]
		xs, ys = append(xs, float64(w.input)), append(ys, msf(float64(a.partValue(w, k, true))))
	}
	return linearFit(xs, ys)
}
