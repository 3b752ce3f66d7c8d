package report

import (
	"fmt"
	"math"
	"slices"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// decodeConcurrency returns, per successful row (parallel to a.ok), the mean
// number of other requests decoding while it decoded (first token → end).
func (a *analysis) decodeConcurrency() []float64 {
	type ev struct {
		t int64
		d int
	}
	evs := make([]ev, 0, 2*len(a.ok))
	for _, i := range a.ok {
		r := &a.rows[i]
		if r.firstTok > 0 && r.end > r.firstTok {
			evs = append(evs, ev{r.firstTok, 1}, ev{r.end, -1})
		}
	}
	slices.SortFunc(evs, func(x, y ev) int { return cmpInt64(x.t, y.t) })
	times := make([]int64, 0, len(evs))
	integ := make([]float64, 0, len(evs)) // ∫ active dt up to times[k]
	active, acc := 0, 0.0
	for k, e := range evs {
		if k > 0 {
			acc += float64(active) * float64(e.t-evs[k-1].t)
		}
		active += e.d
		if len(times) > 0 && times[len(times)-1] == e.t {
			continue
		}
		times, integ = append(times, e.t), append(integ, acc)
	}
	at := func(t int64) float64 {
		k, _ := slices.BinarySearch(times, t)
		return integ[min(k, len(integ)-1)]
	}
	out := make([]float64, len(a.ok))
	for j, i := range a.ok {
		r := &a.rows[i]
		if r.firstTok > 0 && r.end > r.firstTok {
			out[j] = (at(r.end)-at(r.firstTok))/float64(r.end-r.firstTok) - 1
		} else {
			out[j] = math.NaN()
		}
	}
	return out
}

// ruleDecodeBandwidth: TPOT rises with the number of requests decoding at
// once — the signature of a memory-bandwidth-bound decode.
func ruleDecodeBandwidth(a *analysis, rep *Report) (Finding, bool) {
	why, ok := concern(rep, latency.TPOT, latency.ITL)
	if !ok || len(a.ok) < 8 {
		return Finding{}, false
	}
	conc := a.decodeConcurrency()
	var xs, ys []float64
	for j, i := range a.ok {
		if v, ok := metricValue(&a.rows[i], latency.TPOT); ok && !math.IsNaN(conc[j]) {
			xs, ys = append(xs, conc[j]), append(ys, ms(v))
		}
	}
	// Prefill steps that stall the decoders grow TPOT with the crowd too:
	// when they explain the stalls, the trend is theirs, not the memory's.
	if _, ok := rulePrefillInterference(a, rep); ok {
		return Finding{}, false
	}
	f, ok := linearFit(xs, ys)
	if !ok || f.Slope <= 0 || f.R2 < 0.3 {
		return steadyDecode(a, rep, why, xs)
	}
	lo, hi := slices.Min(xs), slices.Max(xs)
	tLo, tHi := f.Intercept+f.Slope*lo, f.Intercept+f.Slope*hi
	if tLo <= 0 || tHi < 1.2*tLo {
		return steadyDecode(a, rep, why, xs)
	}
	nums := map[string]float64{"ms_per_concurrent_request": f.Slope, "r2": f.R2,
		"concurrency_low": lo, "concurrency_high": hi, "tpot_at_low_ms": tLo, "tpot_at_high_ms": tHi}
	ev := fmt.Sprintf("%sTPOT rises with the number of requests decoding at the same time: +%.2f ms per "+
		"concurrent request (R² %.2f, %d requests), from %.1f ms at %.0f to %.1f ms at %.0f concurrent. "+
		"Each decode step reads the weights and every sequence's KV cache from memory, so a bigger batch "+
		"makes each step longer: decode is memory-bandwidth bound.", prefix(why), f.Slope, f.R2, f.N, tLo, lo, tHi, hi)
	return Finding{Severity: SeverityWarning, Title: "TPOT grows with concurrency: decode is memory-bandwidth bound",
		Evidence: ev, Numbers: nums, Remedies: bandwidthRemedies}, true
}

// bandwidthRemedies are the levers on a memory-bound decode step.
var bandwidthRemedies = []string{
	"cap the batch (max concurrent sequences) where TPOT matters more than throughput",
	"quantize weights and KV cache (FP8/INT8) to move fewer bytes per step",
	"a model with grouped-query attention (smaller KV cache)",
	"speculative decoding (several tokens per weight read)",
}

// steadyDecode is decode-bandwidth on a run whose concurrency does not
// vary (a closed loop, a steady rate), where no trend can be fitted: a
// failed TPOT or ITL SLO whose threshold the median request misses too
// (so the breach is the decode step itself, not a few stalls), while
// several requests decode at once and the server preempts nothing.
func steadyDecode(a *analysis, rep *Report, why string, conc []float64) (Finding, bool) {
	tpot, itl := rep.dist(latency.TPOT), rep.dist(latency.ITL)
	if why == "" || tpot == nil || itl == nil || len(conc) == 0 || a.ev.preempting() {
		return Finding{}, false
	}
	batch := 1 + stats.Mean(conc)
	body := false
	for _, v := range rep.SLOs {
		if d := rep.dist(v.Metric); v.Status == StatusFail && d != nil && (v.Metric == latency.TPOT || v.Metric == latency.ITL) &&
			d.P50 > v.ThresholdMS {
			body = true
		}
	}
	if !body {
		return Finding{}, false
	}
	if batch < 1.5 {
		return singleStream(a, why, tpot, itl, batch)
	}
	nums := map[string]float64{"batch_mean": batch, "tpot_p50_ms": tpot.P50, "tpot_p99_ms": tpot.P99,
		"itl_p50_ms": itl.P50, "itl_p90_ms": itl.P90}
	src := "the client's view of requests between first token and end"
	if a.ev.has("running") && a.ev.runningMean > 0 {
		nums["server_running_mean"] = a.ev.runningMean
		src = fmt.Sprintf("the server's /metrics: %.0f running on average", a.ev.runningMean)
	}
	ev := fmt.Sprintf("%sTPOT is the decode step itself: the median request misses the objective too (TPOT P50 %s, P99 %s; ITL P50 %s, P90 %s), "+
		"with about %.0f requests decoding at once (%s). Each decode step reads all the weights and the batch's "+
		"KV cache from memory: decode is memory-bandwidth bound, and fewer bytes per step, or more tokens per "+
		"read, is what makes it faster. Whether a smaller batch helps depends on the KV cache's share of each "+
		"step, which a run at one concurrency cannot show (a sweep over concurrency does).", prefix(why),
		fmtMS(tpot.P50), fmtMS(tpot.P99), fmtMS(itl.P50), fmtMS(itl.P90), batch, src)
	return Finding{Severity: SeverityWarning, Title: "Every decode step is slow: decode is memory-bandwidth bound",
		Evidence: ev, Numbers: nums, Remedies: []string{
			"quantize weights and KV cache (FP8/INT8) to move fewer bytes per step",
			"speculative decoding (several tokens per weight read)",
			"a smaller model, or one with grouped-query attention (smaller KV cache)",
			"cap the batch (max concurrent sequences) if TPOT falls at lower concurrency (sweep --concurrency to see)",
		}}, true
}

// ruleOutputLength: E2E tracks the number of output tokens and a few long
// answers make the tail; capping max_tokens at the P90 output would cut it.
func ruleOutputLength(a *analysis, rep *Report) (Finding, bool) {
	why, ok := concern(rep, latency.E2E, latency.E2EIntended)
	if !ok || len(a.ok) < 8 {
		return Finding{}, false
	}
	var xs, ys []float64
	outs := make([]int64, 0, len(a.ok))
	for _, i := range a.ok {
		r := &a.rows[i]
		e2e, _ := metricValue(r, latency.E2E)
		xs, ys = append(xs, float64(r.output)), append(ys, ms(e2e))
		outs = append(outs, int64(r.output))
	}
	f, ok := linearFit(xs, ys)
	if !ok || f.Slope <= 0 || f.R2 < 0.5 {
		return Finding{}, false
	}
	slices.Sort(outs)
	capTok := stats.Percentile(outs, 90)
	before := a.sample(latency.E2E)
	after := make([]int64, 0, len(a.ok))
	for _, i := range a.ok {
		r := &a.rows[i]
		e, _ := metricValue(r, latency.E2E)
		if tpot, ok := metricValue(r, latency.TPOT); ok && int64(r.output) > capTok {
			e -= (int64(r.output) - capTok) * tpot
		}
		after = append(after, e)
	}
	slices.Sort(after)
	p99b, p99a := stats.Percentile(before, 99), stats.Percentile(after, 99)
	cut := 1 - float64(p99a)/float64(p99b)
	if p99b <= 0 || cut < 0.1 {
		return Finding{}, false
	}
	nums := map[string]float64{"ms_per_output_token": f.Slope, "r2": f.R2, "cap_tokens": float64(capTok),
		"p99_e2e_ms": ms(p99b), "p99_e2e_capped_ms": ms(p99a), "p99_cut": cut,
		"output_p50": float64(stats.Percentile(outs, 50)), "output_p99": float64(stats.Percentile(outs, 99))}
	ev := fmt.Sprintf("%sE2E follows the answer's length: %.1f ms per output token (R² %.2f). Output "+
		"tokens: P50 %d, P90 %d, P99 %d. Capping max_tokens at the P90 (%d) would cut P99 E2E from %s "+
		"to %s (−%.0f%%), computed from each request's own TPOT.", prefix(why), f.Slope, f.R2,
		stats.Percentile(outs, 50), capTok, stats.Percentile(outs, 99), capTok, fmtMS(ms(p99b)), fmtMS(ms(p99a)), 100*cut)
	return Finding{Severity: SeverityWarning, Title: "E2E tail is driven by long answers", Evidence: ev, Numbers: nums,
		Remedies: []string{
			fmt.Sprintf("cap max_tokens (at the P90 output, %d tokens, P99 E2E drops %.0f%%)", capTok, 100*cut),
			"ask for concise answers in the prompt",
			"stream to the user so perceived latency is TTFT, not E2E",
		}}, true
}

// singleStream is decode-bandwidth for one request decoding at a time
// (batch 1): each token reads every weight once, so TPOT's floor is the
// bytes read per token (the weights, plus the KV cache so far) over the
// memory bandwidth, and batching has nothing to share.
func singleStream(a *analysis, why string, tpot, itl *Dist, batch float64) (Finding, bool) {
	nums := map[string]float64{"batch_mean": batch, "tpot_p50_ms": tpot.P50, "tpot_p99_ms": tpot.P99, "itl_p50_ms": itl.P50}
	ev := fmt.Sprintf("%sOne stream decodes at a time (%.1f on average), and the median request misses the objective "+
		"too (TPOT P50 %s, P99 %s): each token is one decode step that reads all the weights and the sequence's KV "+
		"cache from memory, so a single stream's TPOT floor is the bytes read per token ÷ the memory bandwidth "+
		"(tokentrace estimate --model M --gpu G computes it for a known model and hardware; this run names neither, "+
		"so the measured TPOT stands for it).", prefix(why), batch, fmtMS(tpot.P50), fmtMS(tpot.P99))
	if a.engine() == latency.EngineLlamaCpp {
		ev += " On llama.cpp's CPU build the step is also bound by the threads it runs (-t)."
	}
	return Finding{Severity: SeverityWarning, Title: "A single stream's decode is bandwidth-bound: TPOT is at its floor",
		Evidence: ev, Numbers: nums, Remedies: []string{
			"quantize the weights (8- or 4-bit): fewer bytes read per token lowers the floor itself",
			"speculative decoding (a draft model or n-grams): several tokens per read of the weights",
			"a smaller model, or hardware with more memory bandwidth",
			"batching does not lower one stream's TPOT; it only adds streams at about the same TPOT",
		}}, true
}
