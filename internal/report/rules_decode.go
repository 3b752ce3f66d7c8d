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
		if v, ok := metricValue(&a.rows[i], "tpot"); ok && !math.IsNaN(conc[j]) {
			xs, ys = append(xs, conc[j]), append(ys, ms(v))
		}
	}
	f, ok := linearFit(xs, ys)
	if !ok || f.Slope <= 0 || f.R2 < 0.3 {
		return Finding{}, false
	}
	lo, hi := slices.Min(xs), slices.Max(xs)
	tLo, tHi := f.Intercept+f.Slope*lo, f.Intercept+f.Slope*hi
	if tLo <= 0 || tHi < 1.2*tLo {
		return Finding{}, false
	}
	nums := map[string]float64{"ms_per_concurrent_request": f.Slope, "r2": f.R2,
		"concurrency_low": lo, "concurrency_high": hi, "tpot_at_low_ms": tLo, "tpot_at_high_ms": tHi}
	ev := fmt.Sprintf("%sTPOT rises with the number of requests decoding at the same time: +%.2f ms per "+
		"concurrent request (R² %.2f, %d requests), from %.1f ms at %.0f to %.1f ms at %.0f concurrent. "+
		"Each decode step reads the weights and every sequence's KV cache from memory, so a bigger batch "+
		"makes each step longer: decode is memory-bandwidth bound.", prefix(why), f.Slope, f.R2, f.N, tLo, lo, tHi, hi)
	return Finding{Severity: "warning", Title: "TPOT grows with concurrency: decode is memory-bandwidth bound",
		Evidence: ev, Numbers: nums, Remedies: []string{
			"cap the batch (max concurrent sequences) where TPOT matters more than throughput",
			"quantize weights and KV cache (FP8/INT8) to move fewer bytes per step",
			"a model with grouped-query attention (smaller KV cache)",
			"speculative decoding (several tokens per weight read)",
		}}, true
}

// rulePrefillInterference: long gaps in the token stream line up with other
// requests' prefills — the stall a prefill step puts on every decoding request.
func rulePrefillInterference(a *analysis, rep *Report) (Finding, bool) {
	if rep.Summary.ServerSplit*2 < rep.Summary.Succeeded || len(a.ok) < 8 {
		return Finding{}, false
	}
	itl := rep.dist("itl")
	if itl == nil || itl.P50 <= 0 {
		return Finding{}, false
	}
	thr := int64(max(4*itl.P50, 1) * 1e6)
	ov, ok := a.stallOverlap(thr, thr/2)
	if !ok || ov.stalls < 3 || float64(ov.stalls) < 0.01*float64(len(a.ok)) {
		return Finding{}, false
	}
	stalls, frac, base := ov.stalls, ov.share(), ov.chance
	if frac < 0.7 || frac < base+0.2 {
		return Finding{}, false
	}
	nums := map[string]float64{"stalls": float64(stalls), "overlap_share": frac, "prefill_time_share": base,
		"stall_threshold_ms": ms(thr)}
	ev := fmt.Sprintf("%d requests had a gap between tokens of at least %s (4× the median ITL of %s); "+
		"%.0f%% of those gaps overlap another request's prefill, against %.0f%% by chance: "+
		"a long prefill step stalls every request decoding beside it.",
		stalls, fmtMS(ms(thr)), fmtMS(itl.P50), 100*frac, 100*base)
	return Finding{Severity: "warning", Title: "Token stalls coincide with other requests' prefills",
		Evidence: ev, Numbers: nums, Remedies: []string{
			"chunked prefill (split long prompts into steps of bounded size mixed with decodes)",
			"disaggregated prefill and decode on separate replicas for strict ITL targets",
		}}, true
}

// overlap counts the token stalls that overlap another request's prefill.
type overlap struct {
	stalls      int     // stalls at least the threshold long
	overlapping int     // of those, the ones overlapping a prefill window
	chance      float64 // the share a stall of the median length would overlap by chance
}

func (o overlap) share() float64 { return float64(o.overlapping) / float64(o.stalls) }

// stallOverlap finds the requests whose longest chunk gap is at least thr
// and counts those that overlap a prefill of at least minPrefill (windows
// [first token − prefill, first token] of requests with the server's
// split). Chance is the share of start instants at which a stall of the
// median length would overlap some prefill (windows widened by that
// length) over the run's span. ok is false without stalls, windows or span.
func (a *analysis) stallOverlap(thr, minPrefill int64) (overlap, bool) {
	type iv struct{ lo, hi int64 }
	var w []iv
	var stallLens []int64
	var lo0, hi0 int64 = math.MaxInt64, 0
	for _, i := range a.ok {
		r := &a.rows[i]
		lo0, hi0 = min(lo0, r.sent), max(hi0, r.end)
		if r.hasServer() && r.prefill >= minPrefill && r.firstTok > 0 {
			w = append(w, iv{r.firstTok - r.prefill, r.firstTok})
		}
		if r.stall >= thr {
			stallLens = append(stallLens, r.stall)
		}
	}
	if len(stallLens) == 0 || hi0 <= lo0 || len(w) == 0 {
		return overlap{}, false
	}
	slices.Sort(stallLens)
	medStall := stats.Percentile(stallLens, 50)
	union := func(w []iv) []iv {
		w = slices.Clone(w)
		slices.SortFunc(w, func(x, y iv) int { return cmpInt64(x.lo, y.lo) })
		var u []iv
		for _, x := range w {
			if len(u) > 0 && x.lo <= u[len(u)-1].hi {
				u[len(u)-1].hi = max(u[len(u)-1].hi, x.hi)
				continue
			}
			u = append(u, x)
		}
		return u
	}
	u := union(w)
	wide := make([]iv, len(w))
	for k, x := range w {
		wide[k] = iv{x.lo - medStall, x.hi}
	}
	var covered int64
	for _, x := range union(wide) {
		covered += x.hi - x.lo
	}
	o := overlap{stalls: len(stallLens), chance: min(float64(covered)/float64(hi0-lo0), 1)}
	for _, i := range a.ok {
		r := &a.rows[i]
		if r.stall < thr {
			continue
		}
		s0, s1 := r.stallAt, r.stallAt+r.stall
		k, _ := slices.BinarySearchFunc(u, s1, func(x iv, t int64) int { return cmpInt64(x.lo, t) })
		// u[k-1] is the last window starting before the stall ends.
		if k > 0 && u[k-1].hi > s0 {
			o.overlapping++
		}
	}
	return o, true
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
		e2e, _ := metricValue(r, "e2e")
		xs, ys = append(xs, float64(r.output)), append(ys, ms(e2e))
		outs = append(outs, int64(r.output))
	}
	f, ok := linearFit(xs, ys)
	if !ok || f.Slope <= 0 || f.R2 < 0.5 {
		return Finding{}, false
	}
	slices.Sort(outs)
	capTok := stats.Percentile(outs, 90)
	before := a.sample("e2e")
	after := make([]int64, 0, len(a.ok))
	for _, i := range a.ok {
		r := &a.rows[i]
		e, _ := metricValue(r, "e2e")
		if tpot, ok := metricValue(r, "tpot"); ok && int64(r.output) > capTok {
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
	return Finding{Severity: "warning", Title: "E2E tail is driven by long answers", Evidence: ev, Numbers: nums,
		Remedies: []string{
			fmt.Sprintf("cap max_tokens (at the P90 output, %d tokens, P99 E2E drops %.0f%%)", capTok, 100*cut),
			"ask for concise answers in the prompt",
			"stream to the user so perceived latency is TTFT, not E2E",
		}}, true
}

// ruleStalls: token streams that stop for far longer than a decode step —
// preemption, swapping, or a blocked server.
func ruleStalls(a *analysis, rep *Report) (Finding, bool) {
	itl := rep.dist("itl")
	if itl == nil || itl.P50 <= 0 {
		return Finding{}, false
	}
	thr := int64(max(10*itl.P50, 100) * 1e6)
	n := 0
	var worst int64
	for _, i := range a.ok {
		if s := a.rows[i].stall; s >= thr {
			n++
			worst = max(worst, s)
		}
	}
	if n == 0 {
		return Finding{}, false
	}
	return Finding{Severity: "warning", Title: "Token streams stalled",
		Numbers: map[string]float64{"stalled_requests": float64(n), "worst_stall_ms": ms(worst), "threshold_ms": ms(thr)},
		Evidence: fmt.Sprintf("%d request(s) went at least %s without a token (10× the median ITL of %s, "+
			"at least 100 ms); the longest stall was %s. Stalls this long are preemptions (KV cache "+
			"exhausted, sequences swapped or recomputed) or a blocked server, not ordinary decode steps.",
			n, fmtMS(ms(thr)), fmtMS(itl.P50), fmtMS(ms(worst))),
		Remedies: []string{"leave KV-cache headroom (lower max concurrent sequences or gpu memory share)",
			"check the server for preemption/swap counters and long pauses"}}, true
}
