package bench

import (
	"math"
	"slices"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// Compatibility views: the same records measured the way other tools
// define their metrics (docs/metrics.md, "Compatibility views"), so a user
// can line tokentrace's numbers up with theirs.
//
//   - vLLM (benchmarks/serve): TTFT at the first event carrying a choice,
//     even a role-only or empty one; ITL = the gaps between consecutive
//     choice events; latency = the last data event (the usage chunk
//     included) − send; TPOT = (latency − TTFT) / (output tokens − 1).
//   - AIPerf: responses are the content-bearing events (reasoning included);
//     TTFT = first response − send; request latency = last response − send;
//     ITL = (request latency − TTFT) / (output + reasoning tokens − 1), one
//     value per request; ICL = the gaps between consecutive responses.
//   - guidellm: TPOT = (last token − first token) / output tokens.

// CompatRequest is one request's values in each view, in nanoseconds; a
// value is -1 when the view leaves it undefined.
type CompatRequest struct {
	VLLMTTFT, VLLMTPOT    int64
	VLLMITL               []int64
	AIPerfTTFT, AIPerfITL int64
	AIPerfICL             []int64
	GuidellmTPOT          int64
}

// CompatOf computes a successful streaming request's compatibility values.
func CompatOf(r *latency.Record) CompatRequest {
	c := CompatRequest{VLLMTTFT: -1, VLLMTPOT: -1, AIPerfTTFT: -1, AIPerfITL: -1, GuidellmTPOT: -1}
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
	if r.OutputTokens > 1 {
		c.VLLMTPOT = (last - r.SentNS - c.VLLMTTFT) / int64(r.OutputTokens-1)
	}
	// AIPerf: content (and reasoning) responses.
	first := r.FirstTokenNS
	if r.FirstReasonNS != 0 && r.FirstReasonNS < first {
		first = r.FirstReasonNS
	}
	c.AIPerfTTFT = first - r.SentNS
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
// and nearest-rank percentiles, exact up to 65,536 values and from a log
// histogram of 0.1 % resolution beyond.
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
		ITL  CompatStat `json:"itl"`
		ICL  CompatStat `json:"icl"`
	} `json:"aiperf"`
	Guidellm struct {
		TPOT CompatStat `json:"tpot"`
	} `json:"guidellm"`
}

// compatAgg accumulates the views over a run: exactly up to 65,536 values
// each, then in log histograms of 0.1 % resolution (exact means), so its
// memory stops growing with the number of requests.
type compatAgg struct {
	vTTFT, vTPOT, aTTFT, aITL, gTPOT gapHist
	vITL, aICL                       gapHist
}

func (a *compatAgg) add(r *latency.Record) {
	if r.Warmup || !r.Stream {
		return
	}
	c := CompatOf(r)
	if c.VLLMTTFT < 0 {
		return
	}
	push := func(h *gapHist, v int64) {
		if v >= 0 {
			h.add(v)
		}
	}
	push(&a.vTTFT, c.VLLMTTFT)
	push(&a.vTPOT, c.VLLMTPOT)
	push(&a.aTTFT, c.AIPerfTTFT)
	push(&a.aITL, c.AIPerfITL)
	push(&a.gTPOT, c.GuidellmTPOT)
	for _, g := range c.VLLMITL {
		a.vITL.add(g)
	}
	for _, g := range c.AIPerfICL {
		a.aICL.add(g)
	}
}

func (a *compatAgg) views() *CompatViews {
	if a.vTTFT.n == 0 {
		return nil
	}
	v := &CompatViews{}
	v.VLLM.TTFT, v.VLLM.TPOT, v.VLLM.ITL = a.vTTFT.stat(), a.vTPOT.stat(), a.vITL.stat()
	v.AIPerf.TTFT, v.AIPerf.ITL, v.AIPerf.ICL = a.aTTFT.stat(), a.aITL.stat(), a.aICL.stat()
	v.Guidellm.TPOT = a.gTPOT.stat()
	return v
}

// gapHist keeps durations exactly up to gapExact of them, then in a log
// histogram with 0.1 % wide buckets, so its memory is bounded.
type gapHist struct {
	exact  []int64
	counts map[int32]int64
	n      int64
	sum    float64
	zeros  int64
}

const (
	gapRes   = 0.001
	gapExact = 1 << 16
)

func (h *gapHist) add(v int64) {
	h.n++
	h.sum += float64(v)
	if h.counts == nil {
		if len(h.exact) < gapExact {
			h.exact = append(h.exact, v)
			return
		}
		h.counts = map[int32]int64{}
		for _, x := range h.exact {
			h.bucket(x)
		}
		h.exact = nil
	}
	h.bucket(v)
}

func (h *gapHist) bucket(v int64) {
	if v <= 0 {
		h.zeros++
		return
	}
	h.counts[int32(math.Log(float64(v))/math.Log1p(gapRes))]++
}

// stat gives nearest-rank percentiles: exact while the values are kept,
// the bucket's geometric middle after.
func (h *gapHist) stat() CompatStat {
	if h.n == 0 {
		return CompatStat{}
	}
	st := CompatStat{Count: h.n, Mean: h.sum / float64(h.n) / 1e6}
	if h.counts == nil {
		s := slices.Clone(h.exact)
		slices.Sort(s)
		st.P50, st.P90, st.P99 = pctMS(s, 50), pctMS(s, 90), pctMS(s, 99)
		return st
	}
	keys := make([]int32, 0, len(h.counts))
	for k := range h.counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	at := func(p float64) float64 {
		want := int64(math.Ceil(p / 100 * float64(h.n)))
		c := h.zeros
		if c >= want {
			return 0
		}
		for _, k := range keys {
			c += h.counts[k]
			if c >= want {
				return math.Exp((float64(k)+0.5)*math.Log1p(gapRes)) / 1e6
			}
		}
		return 0
	}
	st.P50, st.P90, st.P99 = at(50), at(90), at(99)
	return st
}
