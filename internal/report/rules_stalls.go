package report

import (
	"fmt"
	"math"
	"slices"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/stats"
	"gonum.org/v1/gonum/stat/distuv"
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
	itl := rep.dist(latency.ITL)
	if itl == nil || itl.P50 <= 0 {
		return Finding{}, false
	}
	thr := int64(max(4*itl.P50, 1) * 1e6)
	ov, ok := a.stallOverlap(thr, thr/2)
	if !ok || ov.stalls < 3 || float64(ov.stalls) < 0.01*float64(len(a.ok)) {
		return Finding{}, false
	}
	stalls, frac, base := ov.stalls, ov.share(), ov.chance
	if frac < 0.7 || ov.p > 0.01 {
		return Finding{}, false
	}
	nums := map[string]float64{"stalls": float64(stalls), "overlap_share": frac, "prefill_time_share": base,
		"stall_threshold_ms": ms(thr), "chance_p": ov.p}
	ev := fmt.Sprintf("%s%d requests had a gap between tokens of at least %s (4× the median ITL of %s); "+
		"%.0f%% of those gaps overlap another request's prefill, against %.0f%% by chance (p = %.2g): "+
		"a long prefill step stalls every request decoding beside it.",
		prefix(why), stalls, fmtMS(ms(thr)), fmtMS(itl.P50), 100*frac, 100*base, ov.p)
	if a.ev.noPreemption() {
		ev += fmt.Sprintf(" They are not preemptions: the server's counters show %s.", a.ev.counters())
	}
	more, remedies := a.budgetRemedies(nums, ov, itl.P50)
	return Finding{Severity: SeverityWarning, Title: "Token stalls coincide with other requests' prefills",
		Evidence: ev + more, Numbers: nums, Remedies: remedies}, true
}

// budgetRemedies are the levers on prefill steps that stall decodes:
// chunked prefill when the server says it is off, else the per-step token
// budget (max_num_batched_tokens) with the step time it costs — measured
// from the stalls themselves (each stall ÷ the prompt tokens computed
// beside it) — and the budget that would keep a step within 4× the median
// ITL; and disaggregation.
func (a *analysis) budgetRemedies(nums map[string]float64, ov overlap, itlP50 float64) (evidence string, remedies []string) {
	if a.family() == latency.EngineLlamaCpp {
		return " llama.cpp computes a prompt of up to a batch (-b) in one step with the others' decode tokens; it has no " +
			"other prefill budget.", llamaBatchRemedies
	}
	chunked, knownChunked := a.ev.on("enable_chunked_prefill")
	budget, knownBudget := a.ev.number("max_num_batched_tokens")
	if knownChunked && !chunked {
		remedies = append(remedies, "turn on chunked prefill (enable_chunked_prefill is off): a whole prompt "+
			"is then computed in one step that every decoding request waits for; chunks of at most "+
			"max_num_batched_tokens tokens bound that step")
	}
	if ov.msPerToken <= 0 {
		return "", append(remedies, "a smaller per-step token budget (vLLM's max_num_batched_tokens): a step "+
			"carrying a prefill chunk stalls every decoding request for as long as the chunk takes",
			"disaggregated prefill and decode on separate replicas for strict ITL targets")
	}
	c := ov.msPerToken
	target := math.Max(minBudget, math.Exp2(math.Floor(math.Log2(4*itlP50/c))))
	nums["stall_median_ms"], nums["prefill_tokens_per_stall"], nums["ms_per_1k_prefill_step"] = ms(ov.stall), ov.tokens, 1000*c
	evidence = fmt.Sprintf(" The stalls (median %s) are steps that computed about %s prompt tokens of other "+
		"requests: %.1f ms per 1k tokens.", fmtMS(ms(ov.stall)), num0(ov.tokens), 1000*c)
	if ov.tokens <= target || c*target >= 0.8*ms(ov.stall) {
		// A smaller budget would not shorten these steps: say so, not a
		// budget whose step is as long as (or longer than) the one measured.
		evidence += fmt.Sprintf(" A smaller token budget would not shorten them: they computed %s prompt tokens, "+
			"no more than the least budget worth setting (%s tokens); at this cost per token the stall is the "+
			"hardware's time for even a short chunk.", num0(ov.tokens), num0(target))
		return evidence, append(remedies, "more compute per replica, or a smaller or quantized model (the prompt "+
			"tokens of a step cost more than the decode target allows)",
			"disaggregated prefill and decode on separate replicas for strict ITL targets")
	}
	nums["suggested_max_num_batched_tokens"] = target
	now := "vLLM's max_num_batched_tokens"
	if knownBudget {
		nums["max_num_batched_tokens"] = budget
		now = "max_num_batched_tokens, now " + num0(budget)
		if knownChunked && chunked {
			evidence += fmt.Sprintf(" Chunked prefill is already on, with up to %s tokens per step: the "+
				"budget is the lever.", num0(budget))
		}
	}
	gain := fmt.Sprintf("within 4× the median ITL (%s), instead of the %s measured", fmtMS(itlP50), fmtMS(ms(ov.stall)))
	if c*target > 4*itlP50 {
		gain = fmt.Sprintf("shorter than the %s measured, though still above 4× the median ITL (%s)",
			fmtMS(ms(ov.stall)), fmtMS(itlP50))
	}
	remedies = append(remedies, fmt.Sprintf("lower the per-step token budget (%s): at %s tokens a step "+
		"carrying a prefill chunk would take about %s, %s; the cost is long prompts' TTFT, their prefill "+
		"spread over more steps", now, num0(target), fmtMS(c*target), gain))
	return evidence, append(remedies, "disaggregated prefill and decode on separate replicas for strict ITL targets")
}

// minBudget is the least per-step token budget the advice suggests: below
// it a step's fixed costs outweigh the prompt tokens it saves.
const minBudget = 256

// overlap counts the token stalls that overlap another request's prefill.
type overlap struct {
	stalls      int     // stalls at least the threshold long
	overlapping int     // of those, the ones at least half covered by prefills
	chance      float64 // the share of instants at which a stall of the median length would be, by chance
	p           float64 // the chance of as many overlapping or more if stalls fell at random (binomial)
	// Over the overlapping stalls: the median stall, the median prompt
	// tokens the prefills beside it computed, and the median of stall ÷
	// tokens, the step's cost per prompt token (ms).
	stall      int64
	tokens     float64
	msPerToken float64
}

func (o overlap) share() float64 { return float64(o.overlapping) / float64(o.stalls) }

// interval is a span of the run's clock.
type interval struct{ lo, hi int64 }

// union merges intervals into disjoint ones sorted by start.
func union(w []interval) []interval {
	w = slices.Clone(w)
	slices.SortFunc(w, func(x, y interval) int { return cmpInt64(x.lo, y.lo) })
	var u []interval
	for _, x := range w {
		if len(u) > 0 && x.lo <= u[len(u)-1].hi {
			u[len(u)-1].hi = max(u[len(u)-1].hi, x.hi)
			continue
		}
		u = append(u, x)
	}
	return u
}

// covered is how much of [s0, s1] the disjoint sorted intervals u cover.
func covered(u []interval, s0, s1 int64) int64 {
	k, _ := slices.BinarySearchFunc(u, s0, func(x interval, t int64) int { return cmpInt64(x.hi, t) })
	var n int64
	for ; k < len(u) && u[k].lo < s1; k++ {
		n += min(u[k].hi, s1) - max(u[k].lo, s0)
	}
	return n
}

// stallOverlap finds the requests whose longest chunk gap is at least thr
// and counts those at least half covered by prefills of at least
// minPrefill (windows [first token − prefill, first token] of requests
// with the server's split). Chance is the share of start instants over the
// run (1,000 evenly spaced) at which a stall of the median length would be
// half covered; p is the binomial chance of the count or more at that
// rate. ok is false without stalls, windows or span.
func (a *analysis) stallOverlap(thr, minPrefill int64) (overlap, bool) {
	var w []interval
	var tok []int32 // prompt tokens each window computed
	var stallLens []int64
	var lo0, hi0 int64 = math.MaxInt64, 0
	for _, i := range a.ok {
		r := &a.rows[i]
		lo0, hi0 = min(lo0, r.sent), max(hi0, r.end)
		if r.hasServer() && r.prefill >= minPrefill && r.firstTok > 0 {
			w = append(w, interval{r.firstTok - r.prefill, r.firstTok})
			tok = append(tok, max(r.input-r.cached, 0))
		}
		if r.stall >= thr {
			stallLens = append(stallLens, r.stall)
		}
	}
	if len(stallLens) == 0 || hi0 <= lo0 || len(w) == 0 {
		return overlap{}, false
	}
	slices.Sort(stallLens)
	med := stats.Percentile(stallLens, 50)
	u := union(w)
	o := overlap{stalls: len(stallLens)}
	const probes = 1000
	hits, span := 0, max(hi0-lo0-med, 1)
	for k := range probes {
		s := lo0 + span*int64(k)/probes
		if 2*covered(u, s, s+med) >= med {
			hits++
		}
	}
	o.chance = float64(hits) / probes
	ws := newWindows(w, tok)
	var lens, toks, per []int64
	for _, i := range a.ok {
		r := &a.rows[i]
		if r.stall >= thr && 2*covered(u, r.stallAt, r.stallAt+r.stall) >= r.stall {
			o.overlapping++
			n := ws.tokensBeside(r.stallAt, r.stallAt+r.stall)
			lens, toks = append(lens, r.stall), append(toks, n)
			if n > 0 {
				per = append(per, r.stall*1000/n) // ns per 1k tokens, integer
			}
		}
	}
	for _, x := range [][]int64{lens, toks, per} {
		slices.Sort(x)
	}
	if len(per) > 0 {
		o.stall, o.tokens = stats.Percentile(lens, 50), float64(stats.Percentile(toks, 50))
		o.msPerToken = msf(float64(stats.Percentile(per, 50))) / 1000
	}
	o.p = binomialTail(o.stalls, o.overlapping, o.chance)
	return o, true
}

// binomialTail is P(X ≥ k) for X ~ Binomial(n, p).
func binomialTail(n, k int, p float64) float64 {
	if k <= 0 || p >= 1 {
		return 1
	}
	return distuv.Binomial{N: float64(n), P: p}.Survival(float64(k) - 1)
}

// windows are prefill windows sorted by start, with the prompt tokens
// each computed.
type windows struct {
	w      []interval
	tok    []int32
	maxLen int64
}

func newWindows(w []interval, tok []int32) windows {
	idx := make([]int, len(w))
	for k := range idx {
		idx[k] = k
	}
	slices.SortFunc(idx, func(x, y int) int { return cmpInt64(w[x].lo, w[y].lo) })
	out := windows{w: make([]interval, len(w)), tok: make([]int32, len(w))}
	for k, i := range idx {
		out.w[k], out.tok[k] = w[i], tok[i]
		out.maxLen = max(out.maxLen, w[i].hi-w[i].lo)
	}
	return out
}

// tokensBeside is the prompt tokens computed by the prefill windows that
// overlap [s0, s1] by at least half of either.
func (ws windows) tokensBeside(s0, s1 int64) int64 {
	k, _ := slices.BinarySearchFunc(ws.w, s0-ws.maxLen, func(x interval, t int64) int { return cmpInt64(x.lo, t) })
	var n int64
	for ; k < len(ws.w) && ws.w[k].lo < s1; k++ {
		x := ws.w[k]
		ov := min(x.hi, s1) - max(x.lo, s0)
		if ov > 0 && (2*ov >= s1-s0 || 2*ov >= x.hi-x.lo) {
			n += int64(ws.tok[k])
		}
	}
	return n
}

// ruleStalls: token streams that stop for far longer than a decode step.
// The cause is named from the server's evidence: preemption only when its
// counters show preemptions or a full KV cache; another request's prefill
// when the stalls overlap prefills (left to prefill-interference when that
// rule fires); a blocked server when the counters rule both out; and,
// without counters, the candidates with what would tell them apart.
func ruleStalls(a *analysis, rep *Report) (Finding, bool) {
	itl := rep.dist(latency.ITL)
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
	f := Finding{Severity: SeverityWarning, Title: "Token streams stalled",
		Numbers: map[string]float64{"stalled_requests": float64(n), "worst_stall_ms": ms(worst), "threshold_ms": ms(thr)},
		Evidence: fmt.Sprintf("%d request(s) went at least %s without a token (10× the median ITL of %s, "+
			"at least 100 ms); the longest stall was %s.", n, fmtMS(ms(thr)), fmtMS(itl.P50), fmtMS(ms(worst)))}
	ov, overlaps := a.stallOverlap(thr, thr/2)
	overlaps = overlaps && ov.share() >= 0.5
	switch {
	case a.family() == latency.EngineLlamaCpp:
		// llama.cpp never preempts: a slot keeps its KV cache until it ends.
		f.Title, f.Remedies = "Token streams stalled: llama.cpp computes other requests' prompts in its decode steps", llamaBatchRemedies
		f.Evidence += " llama.cpp does not preempt (a slot keeps its KV cache); each of its steps computes the " +
			"decoding slots' next tokens together with up to a batch (-b, 2048 tokens by default) of a new " +
			"request's prompt, so a stream waits while another prompt is processed."
		if overlaps {
			src := "timings.prompt_ms"
			if a.engine() != latency.EngineLlamaCpp {
				src = "its prefill as the server timed it" // a twin of llama.cpp: no timings object
			}
			f.Evidence += fmt.Sprintf(" %d of the stalls overlap another request's prompt processing (%s; "+
				"%.0f%% by chance).", ov.overlapping, src, 100*ov.chance)
		} else if rep.Summary.ServerSplit == 0 {
			f.Evidence += " The run has no per-request timings to line the stalls up with prompts."
		}
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
		more, rem := a.budgetRemedies(f.Numbers, ov, itl.P50)
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

// llamaBatchRemedies are the levers on llama.cpp's prompt processing
// stalling its decoding slots.
var llamaBatchRemedies = []string{
	"a smaller batch (-b/--batch-size, and -ub/--ubatch-size below it): a prompt longer than the batch is " +
		"computed over several steps, so a decoding stream waits for one batch at a time (llama.cpp's form of chunked prefill)",
	"fewer slots (-np) on a replica that serves latency-sensitive streams, or long prompts sent to another replica",
	"reuse cached prompt prefixes (cache_prompt, --cache-reuse) so repeated prompts are not computed again",
}
