package report

import (
	"fmt"
	"slices"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// breachFindings returns one finding per failed SLO that none of found
// explains: the largest stage in that metric's tail, with its remedies.
func breachFindings(rep *Report, found []Finding) []Finding {
	var out []Finding
	for _, v := range rep.SLOs {
		if v.Status != StatusFail {
			continue
		}
		m := v.Metric
		if slices.ContainsFunc(found, func(f Finding) bool { return slices.Contains(Explains(f.Rule), m) }) {
			continue
		}
		out = append(out, breachFinding(rep, v, m))
	}
	return out
}

func breachFinding(rep *Report, v Verdict, m latency.Metric) Finding {
	f := Finding{Rule: RuleSLOBreach, Severity: SeverityWarning,
		Numbers: map[string]float64{"value_ms": v.ValueMS, "threshold_ms": v.ThresholdMS}}
	why := fmt.Sprintf("SLO %s fails (P%s = %s)", v.SLO, pct(v.Percentile), fmtMS(v.ValueMS))
	var d *Decomposition
	switch m {
	case latency.TTFT, latency.TTFTIntended:
		d = rep.TTFTSplit
	case latency.E2E, latency.E2EIntended:
		d = rep.Decomposition
	}
	name := "p95+"
	if v.Percentile >= 99 {
		name = "p99+"
	}
	g := group(d, name)
	if g == nil || g.Largest == "" {
		// TPOT, ITL and ICL are decode-step times: no stage split applies.
		f.Title = fmt.Sprintf("%s: decode steps are slower than the objective", v.SLO)
		f.Evidence = why + ". The time between tokens is the engine's decode step, set by batch size, " +
			"context length and memory bandwidth; no rule found a more specific cause in this run."
		f.Remedies = stageRemedies(latency.StageDecode)
		return f
	}
	var top StageShare
	for _, s := range g.Stages {
		if s.Hop == g.LargestHop && s.Stage == g.Largest {
			top = s
		}
	}
	f.Title = fmt.Sprintf("%s: the largest term in its tail is %s", v.SLO, partWords(top))
	f.Evidence = fmt.Sprintf("%s. Above its P%s (%d requests) %s takes %.0f%% of %s (mean %s of %s); "+
		"no rule found a more specific pattern (for example a trend with input length or load).",
		why, name[1:len(name)-1], g.Requests, partWords(top), 100*top.Share, m, fmtMS(top.MeanMS), fmtMS(g.TotalMS))
	if top.Stage == string(latency.StageUnattributed) {
		f.Evidence += " Unattributed is time the server did not split: its queue wait, its prefill and the " +
			"network between client and server are not known apart in this run, so no one of them is to blame yet."
	}
	f.Numbers["largest_share"] = top.Share
	f.Remedies = partRemedies(top)
	return f
}

// stageRemedies are the levers that act on one stage.
func stageRemedies(s latency.Stage) []string {
	switch s {
	case latency.StagePrefill:
		return []string{"prefix caching, if prompts share a system prompt or history",
			"chunked prefill (bounds one long prompt's cost to others)",
			"shorter prompts", "more compute per replica, or a smaller or quantized model (prefill is compute-bound)"}
	case latency.StageServerQueue, latency.StageClientQueue:
		return []string{"more replicas, or fewer requests per replica (admission control, load shedding)",
			"priority scheduling for latency-sensitive requests"}
	case latency.StageDecode:
		return []string{"smaller batches (max_num_seqs) for latency", "quantized weights or KV cache (FP8, INT8)",
			"speculative decoding", "cap max_tokens where answers run long"}
	case latency.StageUnattributed:
		// Never the network by default: nothing says where this time went.
		return []string{"get the server's own split of this time: a server that reports per-request timings " +
			"(Server-Timing, vLLM's metrics object, llama.cpp's timings, TGI's headers), or tokentrace's gateway in front of it",
			"scrape the server's /metrics during the run (bench records them): a queue gauge that fills says queueing, " +
				"an empty one points at prefill or what lies between client and server"}
	default:
		return outsideRemedies(s)
	}
}

// Explains lists the metrics a rule's finding can account for (nil for a
// rule that accounts for none in particular; slo-breach names its metric in
// its title).
func Explains(rule string) []latency.Metric {
	r, _ := RuleNamed(rule)
	return r.Explains
}
