package report

import (
	"fmt"
	"io"
	"slices"
	"strings"

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
	return compatOf(r, nil, nil, nil)
}

// compatOf is CompatOf with the vLLM ITL and AIPerf ICL gaps appended to
// itl and icl, and evs as room for the sorted choice events, so a caller
// that reuses them allocates nothing per record.
func compatOf(r *latency.Record, itl, icl, evs []int64) CompatRequest {
	c := CompatRequest{VLLMTTFT: -1, VLLMTPOT: -1, AIPerfTTFT: -1, AIPerfITL: -1, AIPerfTTFO: -1, GuidellmTPOT: -1}
	if !r.OK() || len(r.ChunkNS) == 0 {
		return c
	}
	// vLLM: every choice event.
	ev := r.ChunkNS
	if len(r.OtherNS) > 0 {
		ev = append(append(evs[:0], r.ChunkNS...), r.OtherNS...)
		slices.Sort(ev)
	}
	c.VLLMTTFT = ev[0] - r.SentNS
	for i := 1; i < len(ev); i++ {
		itl = append(itl, ev[i]-ev[i-1])
	}
	c.VLLMITL = itl
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
	c.AIPerfICL = r.ICLs(icl)
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

// The views, each a distribution over the run.
const (
	cvTTFT = iota // vLLM
	cvTPOT
	cvITL
	caTTFT // AIPerf
	caTTFO // only requests that reasoned
	caITL
	caICL
	cgTPOT // guidellm
	nCompat
)

// compatGaps are the views of every gap of a request rather than one value.
var compatGaps = [...]int{cvITL, caICL}

// compatAgg accumulates the views over a run, the collector's: exactly up
// to 65,536 values each, then in histograms within 0.05 % (exact means),
// so its memory stops growing with the number of requests.
type compatAgg [nCompat]stats.Sample

// gapsCounted says whether the gap views count in histograms (a batch may
// then leave their values one by one out: compatBatch.countInHists).
func (a *compatAgg) gapsCounted() bool {
	for _, g := range compatGaps {
		if a[g].Hist() == nil {
			return false
		}
	}
	return true
}

// merge adds a batch's values, in the form it kept them.
func (a *compatAgg) merge(b *compatBatch) {
	for i := range a {
		vs, h := b.vals[i], &b.hists[i]
		if b.dropped[i] {
			vs = nil
		}
		if !b.hist {
			h = nil
		}
		a[i].AddBatch(vs, h)
	}
}

func (a *compatAgg) views() *CompatViews {
	if a[cvTTFT].Count() == 0 {
		return nil
	}
	v := &CompatViews{}
	v.VLLM.TTFT, v.VLLM.TPOT, v.VLLM.ITL = compatStat(&a[cvTTFT]), compatStat(&a[cvTPOT]), compatStat(&a[cvITL])
	v.AIPerf.TTFT, v.AIPerf.ITL, v.AIPerf.ICL = compatStat(&a[caTTFT]), compatStat(&a[caITL]), compatStat(&a[caICL])
	v.Guidellm.TPOT = compatStat(&a[cgTPOT])
	v.AIPerf.TTFO = compatStat(&a[caTTFO])
	return v
}

// compatBatch is a batch's values of each view (a digest's): one by one
// and, when hist is set, also counted in histograms, the form a collector
// whose views count in histograms merges. Warm-up requests, requests that
// did not stream and failed ones have no values.
type compatBatch struct {
	vals  [nCompat][]int64
	hists [nCompat]stats.Histogram
	hist  bool
	// dropped marks the gap views whose values one by one the batch left
	// out (it has hist): more than a collector keeps exactly, or the
	// collector's already count in histograms (dropGaps).
	dropped       [nCompat]bool
	itl, icl, evs []int64 // scratch for compatOf
}

// reset empties b, keeping its storage; it keeps values one by one only.
func (b *compatBatch) reset() {
	for i := range b.vals {
		b.vals[i] = b.vals[i][:0]
		b.hists[i].Reset()
	}
	b.hist, b.dropped = false, [nCompat]bool{}
}

// countInHists makes b count every value in histograms too and, with
// dropGaps, leave the gap views' values one by one out.
func (b *compatBatch) countInHists(dropGaps bool) {
	b.hist = true
	for _, g := range compatGaps {
		b.dropped[g] = dropGaps
	}
}

func (b *compatBatch) add(r *latency.Record) {
	if r.Warmup || !r.Stream {
		return
	}
	if len(r.OtherNS) > 0 {
		b.evs = slices.Grow(b.evs[:0], len(r.ChunkNS)+len(r.OtherNS))
	}
	c := compatOf(r, b.itl[:0], b.icl[:0], b.evs)
	if c.VLLMTTFT < 0 {
		return
	}
	b.itl, b.icl = c.VLLMITL, c.AIPerfICL
	ttfo := c.AIPerfTTFO
	if r.FirstReasonNS == 0 {
		ttfo = -1
	}
	for i, v := range [...]int64{cvTTFT: c.VLLMTTFT, cvTPOT: c.VLLMTPOT, caTTFT: c.AIPerfTTFT, caTTFO: ttfo, caITL: c.AIPerfITL,
		cgTPOT: c.GuidellmTPOT, cvITL: -1, caICL: -1} {
		if v >= 0 {
			b.push(i, v)
		}
	}
	for _, g := range compatGaps {
		vs := c.VLLMITL
		if g == caICL {
			vs = c.AIPerfICL
		}
		if b.hist {
			for _, v := range vs {
				b.hists[g].Add(v)
			}
			if len(b.vals[g])+len(vs) > stats.DefaultExactCap {
				b.dropped[g], b.vals[g] = true, b.vals[g][:0] // the collector would count them in a histogram
			}
		}
		if !b.dropped[g] {
			b.vals[g] = append(b.vals[g], vs...)
		}
	}
}

// push adds one value of view i.
func (b *compatBatch) push(i int, v int64) {
	b.vals[i] = append(b.vals[i], v)
	if b.hist {
		b.hists[i].Add(v)
	}
}

// compatStat summarises one view's sample in milliseconds.
func compatStat(s *stats.Sample) CompatStat {
	if s.Count() == 0 {
		return CompatStat{}
	}
	p, _ := s.Percentiles(50, 90, 99)
	return CompatStat{Count: s.Count(), Mean: s.Mean() / 1e6, P50: ms(p[0]), P90: ms(p[1]), P99: ms(p[2])}
}

// WriteCompat writes the compatibility views' console lines, each starting
// with label (ten columns, "compat" where one run is shown; nothing for
// nil): each peer's TTFT, TPOT and ITL as it defines them, and when
// answers reasoned, which first token each prints as TTFT beside AIPerf's
// time to first answer token (docs/metrics.md, "Compatibility views").
func WriteCompat(w io.Writer, label string, v *CompatViews) {
	if v == nil {
		return
	}
	fmt.Fprintf(w, "%-9s vLLM TTFT/TPOT/ITL P50 %.2f/%.2f/%.2f ms · AIPerf ITL/ICL P50 %.2f/%.2f ms · guidellm TPOT P50 %.2f ms (docs/metrics.md)\n",
		label, v.VLLM.TTFT.P50, v.VLLM.TPOT.P50, v.VLLM.ITL.P50, v.AIPerf.ITL.P50, v.AIPerf.ICL.P50, v.Guidellm.TPOT.P50)
	if v.AIPerf.TTFO.Count > 0 {
		fmt.Fprintf(w, "%-9s reasoning: TTFT P50 as vLLM prints it %.2f ms (first choice event), as AIPerf %.2f ms (first reasoning or content); time to first answer token: AIPerf TTFO %.2f ms (docs/metrics.md)\n",
			label, v.VLLM.TTFT.P50, v.AIPerf.TTFT.P50, v.AIPerf.TTFO.P50)
	}
}

// writeCompatCompare writes two runs' compatibility views side by side,
// their P50s, one line a metric (nothing when neither run
// streamed; "—" for a run that did not). AIPerf's TTFT and TTFO are
// shown when an answer of either run reasoned first.
func writeCompatCompare(w io.Writer, a, b *CompatViews) {
	if a == nil && b == nil {
		return
	}
	rows := []struct {
		name string
		stat func(*CompatViews) CompatStat
	}{
		{"vLLM TTFT", func(v *CompatViews) CompatStat { return v.VLLM.TTFT }},
		{"vLLM TPOT", func(v *CompatViews) CompatStat { return v.VLLM.TPOT }},
		{"vLLM ITL", func(v *CompatViews) CompatStat { return v.VLLM.ITL }},
		{"AIPerf TTFT", func(v *CompatViews) CompatStat { return v.AIPerf.TTFT }},
		{"AIPerf TTFO", func(v *CompatViews) CompatStat { return v.AIPerf.TTFO }},
		{"AIPerf ITL", func(v *CompatViews) CompatStat { return v.AIPerf.ITL }},
		{"AIPerf ICL", func(v *CompatViews) CompatStat { return v.AIPerf.ICL }},
		{"guidellm TPOT", func(v *CompatViews) CompatStat { return v.Guidellm.TPOT }},
	}
	reasoned := (a != nil && a.AIPerf.TTFO.Count > 0) || (b != nil && b.AIPerf.TTFO.Count > 0)
	cell := func(v *CompatViews, stat func(*CompatViews) CompatStat) string {
		if v == nil {
			return "—"
		}
		return fmt.Sprintf("%.2fms", stat(v).P50)
	}
	fmt.Fprintf(w, "%-29s %9s %9s\n", "compat P50 (docs/metrics.md)", "A", "B")
	for _, r := range rows {
		if strings.HasPrefix(r.name, "AIPerf TT") && !reasoned {
			continue
		}
		fmt.Fprintf(w, "%-29s %9s %9s\n", r.name, cell(a, r.stat), cell(b, r.stat))
	}
}
