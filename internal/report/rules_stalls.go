package report

import (
	"fmt"
	"math"
	"slices"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// rulePrefillInterference: long gaps in the token stream line up with other
// requests' prefills — the stall a prefill step puts on every decoding
// request. The lever is the per-step token budget (or chunked prefill when
// the server says it is off), with the step time it costs.
func rulePrefillInterference(a *analysis, rep *Report) (Finding, bool) {
	why, ok := concern(rep, latency.TPOT, latency.ITL, latency.ICL)
	if !ok || rep.Summary.ServerSplit*2 < rep.Summary.Succeeded || len(a.ok) < 8 {
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
	ev := fmt.Sprintf("%s%d requests had a gap between tokens of at least %s (4× the median ITL of %s); "+
		"%.0f%% of those gaps overlap another request's prefill, against %.0f%% by chance: "+
		"a long prefill step stalls every request decoding beside it.",
		prefix(why), stalls, fmtMS(ms(thr)), fmtMS(itl.P50), 100*frac, 100*base)
	if a.ev.noPreemption() {
		ev += fmt.Sprintf(" They are not preemptions: the server's counters show %s.", a.ev.counters())
	}
	more, remedies := a.budgetRemedies(nums)
	return Finding{Severity: "warning", Title: "Token stalls coincide with other requests' prefills",
		Evidence: ev + more, Numbers: nums, Remedies: remedies}, true
}

// budgetRemedies are the levers on a prefill step that stalls decodes:
// chunked prefill when the server says it is off, else the per-step token
// budget (max_num_batched_tokens) with the step time it costs at the
// measured prefill cost; and disaggregation.
func (a *analysis) budgetRemedies(nums map[string]float64) (evidence string, remedies []string) {
	chunked, knownChunked := a.ev.on("enable_chunked_prefill")
	budget, knownBudget := a.ev.number("max_num_batched_tokens")
	cost, knownCost := a.prefillCost()
	if knownChunked && !chunked {
		remedies = append(remedies, "turn on chunked prefill (enable_chunked_prefill is off): a whole prompt "+
			"is then computed in one step that every decoding request waits for; chunks of at most "+
			"max_num_batched_tokens tokens bound that step")
	}
	switch {
	case knownBudget && knownCost && budget > 0:
		step, lower := cost*budget, math.Max(256, math.Round(budget/4/256)*256)
		nums["max_num_batched_tokens"], nums["prefill_step_ms"] = budget, step
		evidence = fmt.Sprintf(" A step that computes a prefill chunk of up to %s tokens (max_num_batched_tokens) "+
			"takes about %s at the %.1f ms per 1k prompt tokens the server took here.", num0(budget), fmtMS(step), 1000*cost)
		if knownChunked && chunked {
			evidence += " Chunked prefill is already on: the chunk size is the lever."
		}
		remedies = append(remedies, fmt.Sprintf("lower the per-step token budget (max_num_batched_tokens, now %s): "+
			"at %s a prefill step would stall decodes about %s instead of %s, at the cost of long prompts' TTFT "+
			"(their prefill spread over more steps, each shared with decodes)", num0(budget), num0(lower),
			fmtMS(cost*lower), fmtMS(step)))
	case knownCost:
		nums["ms_per_1k_computed"] = 1000 * cost
		remedies = append(remedies, fmt.Sprintf("a smaller per-step token budget (vLLM's max_num_batched_tokens): "+
			"each step that carries a prefill chunk of B tokens stalls every decoding request for about B × %.3f ms",
			cost))
	default:
		remedies = append(remedies, "a smaller per-step token budget (vLLM's max_num_batched_tokens): a step "+
			"carrying a prefill chunk stalls every decoding request for as long as the chunk takes")
	}
	return evidence, append(remedies, "disaggregated prefill and decode on separate replicas for strict ITL targets")
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

// ruleStalls: token streams that stop for far longer than a decode step.
// The cause is named from the server's evidence: preemption only when its
// counters show preemptions or a full KV cache; another request's prefill
// when the stalls overlap prefills (left to prefill-interference when that
// rule fires); a blocked server when the counters rule both out; and,
// without counters, the candidates with what would tell them apart.
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
	f := Finding{Severity: "warning", Title: "Token streams stalled",
		Numbers: map[string]float64{"stalled_requests": float64(n), "worst_stall_ms": ms(worst), "threshold_ms": ms(thr)},
		Evidence: fmt.Sprintf("%d request(s) went at least %s without a token (10× the median ITL of %s, "+
			"at least 100 ms); the longest stall was %s.", n, fmtMS(ms(thr)), fmtMS(itl.P50), fmtMS(ms(worst)))}
	ov, overlaps := a.stallOverlap(thr, thr/2)
	overlaps = overlaps && ov.share() >= 0.5
	switch {
	case a.ev.preempting():
		f.Title = "Token streams stalled: the server preempted requests"
		f.Evidence += fmt.Sprintf(" The server's counters show the KV cache running out (%s): a preempted "+
			"request stops until its KV cache is recomputed or swapped back.", a.ev.counters())
		f.Remedies = a.kvRemedies()
	case overlaps:
		if _, ok := rulePrefillInterference(a, rep); ok {
			return Finding{}, false // that finding names the cause and the lever
		}
		f.Title = "Token streams stalled behind other requests' prefills"
		f.Evidence += fmt.Sprintf(" %d of them overlap another request's prefill (%.0f%% by chance): a step "+
			"that computes a long prompt stalls every request decoding beside it.", ov.overlapping, 100*ov.chance)
		if a.ev.noPreemption() {
			f.Evidence += fmt.Sprintf(" They are not preemptions: the server's counters show %s.", a.ev.counters())
		}
		more, rem := a.budgetRemedies(f.Numbers)
		f.Evidence, f.Remedies = f.Evidence+more, rem
	case a.ev.noPreemption():
		f.Title = "Token streams stalled: the server was blocked"
		f.Evidence += fmt.Sprintf(" They are not preemptions (the server's counters show %s), nor other "+
			"requests' prefills: the stream waited outside the engine's steps.", a.ev.counters())
		f.Remedies = []string{"check the server host for CPU starvation and pauses (GC, swapping, noisy neighbours)",
			"check what sits between server and client for buffering (proxies, load balancers)",
			"check the client: one that reads slowly holds the server's writes"}
	default:
		f.Evidence += " Stalls this long are preemptions (KV cache exhausted, sequences swapped or recomputed), " +
			"another request's long prefill step, or a blocked server, not ordinary decode steps; the run has no " +
			"server counters (preemptions, KV-cache usage) to tell which."
		f.Remedies = []string{"read the server's preemption counter and KV-cache usage (bench records them from its /metrics)",
			"leave KV-cache headroom if it preempts (lower max concurrent sequences or raise its memory share)"}
	}
	return f, true
}
