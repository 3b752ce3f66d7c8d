package bench

import (
	"slices"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// Compatibility views: the same records measured the way other tools
// define their metrics (docs/metrics.md, "Compatibility views"), so a user
// can line tokentrace's numbers up with theirs.
//
//   - vLLM (benchmarks/serve): TTFT at the first event carrying a choice,
//     even a role-only or empty one; ITL = the gaps between consecutive
//     choice events; latency = the last data event (the usage chunk
//     included) − send; TPOT = (latency − TTFT) / (output tokens − 1),
//     output tokens being usage's completion_tokens (reasoning included).
//   - AIPerf: responses are the content-bearing events (reasoning included);
//     TTFT = first response − send; request latency = last response − send;
//     ITL = (request latency − TTFT) / (output + reasoning tokens − 1), one
//     value per request; ICL = the gaps between consecutive responses.
//     TTFO (time to first output token) = the first content response −
//     send: a reasoning model's first answer token (tokentrace's
//     ttft_answer), where its TTFT counts the reasoning.
//   - guidellm: TPOT = (last token − first token) / output tokens.

// CompatRequest is one request's values in each view, in nanoseconds; a
// value is -1 when the view leaves it undefined.
type CompatRequest struct {
	VLLMTTFT, VLLMTPOT    int64
	VLLMITL               []int64
	AIPerfTTFT, AIPerfITL int64
	AIPerfTTFO            int64
	AIPerfICL             []int64
	GuidellmTPOT          int64
}

// CompatOf computes a successful streaming request's compatibility values.
func CompatOf(r *latency.Record) CompatRequest {
	c := CompatRequest{VLLMTTFT: -1, VLLMTPOT: -1, AIPerfTTFT: -1, AIPerfITL: -1, AIPerfTTFO: -1, GuidellmTPOT: -1}
	if !r.OK() || len(r.ChunkNS) == 0 {
		return c
	}
	// vLLM: every choice event.
	ev := make([]int64, 0, len(r.ChunkNS)+len(r.OtherNS))
	ev = append(append(ev, r.ChunkNS...), r.OtherNS...)
	slices.Sort(ev)
	c.VLLMTTFT = ev[0] - r.SentNS
	for i := 1; i < len(ev); i++ {
		c.VLLMITL = append(c.VLLMITL, ev[i]-ev[i-1])
	}
	last := r.LastEventNS
	if last == 0 {
		last = ev[len(ev)-1]
	}
	if n := r.OutputTokens + r.ReasoningTokens; n > 1 { // usage's completion_tokens
		c.VLLMTPOT = (last - r.SentNS - c.VLLMTTFT) / int64(n-1)
	}
	// AIPerf: content (and reasoning) responses.
	first := r.FirstTokenNS
	if r.FirstReasonNS != 0 && r.FirstReasonNS < first {
		first = r.FirstReasonNS
	}
	c.AIPerfTTFT = first - r.SentNS
	c.AIPerfTTFO = r.FirstTokenNS - r.SentNS
	lastResp := r.ChunkNS[len(r.ChunkNS)-1]
	if osl := r.OutputTokens + r.ReasoningTokens; osl > 1 {
		c.AIPerfITL = (lastResp - first) / int64(osl-1)
	}
	c.AIPerfICL = r.ICLs(nil)
	// guidellm.
	if r.OutputTokens > 0 {
		c.GuidellmTPOT = (lastResp - r.FirstTokenNS) / int64(r.OutputTokens)
	}
	return c
}

// CompatStat is one metric's distribution in milliseconds: an exact mean,
// and nearest-rank percentiles (internal/stats), exact up to 65,536 values
// and from its histogram (within 0.05 %) beyond.
type CompatStat struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
}

// CompatViews is the run in each tool's terms.
type CompatViews struct {
	VLLM struct {
		TTFT CompatStat `json:"ttft"`
		TPOT CompatStat `json:"tpot"`
		ITL  CompatStat `json:"itl"`
	} `json:"vllm"`
	AIPerf struct {
		TTFT CompatStat `json:"ttft"`
		// TTFO is set when some answer reasoned first (else it is TTFT).
		TTFO CompatStat `json:"ttfo,omitzero"`
		ITL  CompatStat `json:"itl"`
		ICL  CompatStat `json:"icl"`
	} `json:"aiperf"`
	Guidellm struct {
		TPOT CompatStat `json:"tpot"`
	} `json:"guidellm"`
}

// compatAgg accumulates the views over a run: exactly up to 65,536 values
// each, then in histograms within 0.05 % (exact means), so its memory
// stops growing with the number of requests.
type compatAgg struct {
	vTTFT, vTPOT, aTTFT, aITL, gTPOT stats.Sample
	aTTFO                            stats.Sample // only requests that reasoned
	vITL, aICL                       stats.Sample
}

func (a *compatAgg) add(r *latency.Record) {
	if r.Warmup || !r.Stream {
		return
	}
	c := CompatOf(r)
	if c.VLLMTTFT < 0 {
		return
	}
	push := func(h *stats.Sample, v int64) {
		if v >= 0 {
			h.Add(v)
		}
	}
	push(&a.vTTFT, c.VLLMTTFT)
	push(&a.vTPOT, c.VLLMTPOT)
	push(&a.aTTFT, c.AIPerfTTFT)
	if r.FirstReasonNS != 0 {
		push(&a.aTTFO, c.AIPerfTTFO)
	}
	push(&a.aITL, c.AIPerfITL)
	push(&a.gTPOT, c.GuidellmTPOT)
	for _, g := range c.VLLMITL {
		a.vITL.Add(g)
	}
	for _, g := range c.AIPerfICL {
		a.aICL.Add(g)
	}
}

func (a *compatAgg) views() *CompatViews {
	if a.vTTFT.Count() == 0 {
		return nil
	}
	v := &CompatViews{}
	v.VLLM.TTFT, v.VLLM.TPOT, v.VLLM.ITL = compatStat(&a.vTTFT), compatStat(&a.vTPOT), compatStat(&a.vITL)
	v.AIPerf.TTFT, v.AIPerf.ITL, v.AIPerf.ICL = compatStat(&a.aTTFT), compatStat(&a.aITL), compatStat(&a.aICL)
	v.Guidellm.TPOT = compatStat(&a.gTPOT)
	v.AIPerf.TTFO = compatStat(&a.aTTFO)
	return v
}

// compatStat summarises one view's sample in milliseconds.
func compatStat(s *stats.Sample) CompatStat {
	if s.Count() == 0 {
		return CompatStat{}
	}
	p, _ := s.Percentiles(50, 90, 99)
	return CompatStat{Count: s.Count(), Mean: s.Mean() / 1e6, P50: ms(p[0]), P90: ms(p[1]), P99: ms(p[2])}
}

// ms converts nanoseconds to milliseconds.
func ms(ns int64) float64 { return float64(ns) / 1e6 }
