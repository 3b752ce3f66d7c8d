package report

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// diagnose runs every rule over the run and returns their findings,
// critical first.
func diagnose(a *analysis, rep *Report) []Finding {
	var out []Finding
	for _, r := range rules {
		if f, ok := r.check(a, rep); ok {
			f.Rule = r.name
			out = append(out, f)
		}
	}
	out = append(out, breachFindings(rep, out)...)
	sev := map[string]int{"critical": 0, "warning": 1, "info": 2}
	slices.SortStableFunc(out, func(x, y Finding) int { return sev[x.Severity] - sev[y.Severity] })
	return out
}

// rule is one diagnosis: check reads the run and returns a finding when the
// pattern it looks for is there. Every rule is a small function below, with
// its thresholds written out in docs/report.md and its own test on a
// synthetic run built to trigger it and one built not to.
type rule struct {
	name  string
	check func(a *analysis, rep *Report) (Finding, bool)
}

var rules = []rule{
	{"client-bottleneck", ruleClientBottleneck},
	{"server-queueing", ruleServerQueueing},
	{"prefill-bound", rulePrefillBound},
	{"decode-bandwidth", ruleDecodeBandwidth},
	{"prefill-interference", rulePrefillInterference},
	{"output-length", ruleOutputLength},
	{"outside-model", ruleOutsideModel},
	{"errors", ruleErrors},
	{"stalls", ruleStalls},
}

// concern says whether a metric deserves a rule's attention: an SLO on it
// failed (why names it), or no SLO names it (the rule then judges the
// pattern alone). A metric whose SLOs all passed needs no explaining.
func concern(rep *Report, metrics ...latency.Metric) (why string, ok bool) {
	named := false
	for _, v := range rep.SLOs {
		if !slices.Contains(metrics, latency.Metric(v.Metric)) {
			continue
		}
		named = true
		if v.Status == "fail" {
			return fmt.Sprintf("SLO %s fails (P%s = %s)", v.SLO, pct(v.Percentile), fmtMS(v.ValueMS)), true
		}
	}
	if named {
		return "", false
	}
	return "", true
}

func pct(p float64) string { return strings.TrimSuffix(fmt.Sprintf("%g", p), ".0") }

func prefix(why string) string {
	if why == "" {
		return ""
	}
	return why + ". "
}

// group returns a decomposition's group by name.
func group(d *Decomposition, name string) *StageGroup {
	if d == nil {
		return nil
	}
	for i := range d.Groups {
		if d.Groups[i].Name == name {
			return &d.Groups[i]
		}
	}
	return nil
}

func (g *StageGroup) share(stage latency.Stage) float64 {
	for _, s := range g.Stages {
		if s.Stage == string(stage) {
			return s.Share
		}
	}
	return 0
}

func (g *StageGroup) meanMS(stage latency.Stage) float64 {
	for _, s := range g.Stages {
		if s.Stage == string(stage) {
			return s.MeanMS
		}
	}
	return 0
}

func (a *analysis) dist(rep *Report, metric string) *Dist {
	for i := range rep.Metrics {
		if rep.Metrics[i].Metric == metric {
			return &rep.Metrics[i]
		}
	}
	return nil
}

// byTime returns the successful rows ordered by send instant.
func (a *analysis) byTime() []int32 {
	if a.timeOrder == nil {
		idx := slices.Clone(a.ok)
		slices.SortStableFunc(idx, func(x, y int32) int { return cmpInt64(a.rows[x].sent, a.rows[y].sent) })
		a.timeOrder = idx
	}
	return a.timeOrder
}

// quarters returns the mean of v over the first and the last quarter of the
// successful requests in send order.
func (a *analysis) quarters(v func(*row) int64) (first, last float64) {
	idx := a.byTime()
	q := len(idx) / 4
	if q == 0 {
		return 0, 0
	}
	var s0, s1 float64
	for _, i := range idx[:q] {
		s0 += float64(v(&a.rows[i]))
	}
	for _, i := range idx[len(idx)-q:] {
		s1 += float64(v(&a.rows[i]))
	}
	return msf(s0 / float64(q)), msf(s1 / float64(q))
}

// ruleServerQueueing: TTFT's tail is mostly waiting in the server's
// scheduler, the queue grows over the run or requests arrive faster than
// they complete.
func ruleServerQueueing(a *analysis, rep *Report) (Finding, bool) {
	why, ok := concern(rep, latency.TTFT, latency.TTFTIntended)
	if !ok || len(a.ok) < 8 {
		return Finding{}, false
	}
	s := rep.Summary
	// Rate estimates from a finite run are rough (a burst at the end raises
	// the offered rate): a small excess counts as overload only when the
	// queue grows too, a large one (25 %) on its own.
	split := s.ServerSplit*2 >= s.Succeeded
	var w0, w1 float64 // mean wait (server queue, or TTFT without a split), first and last quarter
	if split {
		w0, w1 = a.quarters(func(r *row) int64 { return r.sq })
	} else {
		// An answer that came whole (no first-token instant) counts to its end.
		w0, w1 = a.quarters(func(r *row) int64 { return r.firstOut() - r.sent })
	}
	growing := w1 > 1.5*w0 && w1-w0 > 1
	isOver := func(offered, completed float64) bool {
		return completed > 0 && (offered > 1.25*completed || (offered > 1.05*completed && growing))
	}
	overloaded := isOver(s.OfferedRPS, s.CompletionRPS)
	capacity, capBasis := s.CompletionRPS, "the steady rate requests completed at while overloaded"
	if !overloaded {
		capBasis = "the rate requests completed at; the run did not saturate the server, so capacity is at least this"
	}
	overloadEv := fmt.Sprintf(" Requests arrived at %s req/s but completed at %s req/s: the offered rate is "+
		"above the measured capacity.", num(s.OfferedRPS), num(s.CompletionRPS))
	if len(rep.Phases) > 0 {
		// A sweep: judge each step on its own rates.
		overloaded = false
		var over []string
		peak := 0.0
		for _, ph := range rep.Phases {
			peak = max(peak, ph.CompletionRPS)
			if isOver(ph.OfferedRPS, ph.CompletionRPS) {
				overloaded = true
				over = append(over, fmt.Sprintf("%s (offered %s, completed %s req/s)", ph.Name,
					num(ph.OfferedRPS), num(ph.CompletionRPS)))
			}
		}
		capacity, capBasis = peak, "the highest steady completion rate of any sweep step"
		overloadEv = " Steps offered more than the server completed: " + strings.Join(over, ", ") + "."
	}
	if rep.Capacity != nil {
		capacity, capBasis = rep.Capacity.RPS, rep.Capacity.Basis
	}
	tail := group(rep.TTFTSplit, "p95+")
	nums := map[string]float64{"offered_rps": s.OfferedRPS, "completion_rps": s.CompletionRPS, "capacity_rps": capacity}
	var ev string
	if split && tail != nil {
		share := tail.share(latency.StageServerQueue)
		if tail.Largest != string(latency.StageServerQueue) || share < 0.4 {
			return Finding{}, false
		}
		q0, q1 := w0, w1
		nums["queue_share_p95"], nums["queue_first_quarter_ms"], nums["queue_last_quarter_ms"] = share, q0, q1
		if !growing && !overloaded && share < 0.5 {
			return Finding{}, false
		}
		ev = fmt.Sprintf("%sServer queueing is the largest TTFT term in the tail: %.0f%% of TTFT above its "+
			"P95 (mean wait %s of %s).", prefix(why), 100*share, fmtMS(tail.meanMS(latency.StageServerQueue)), fmtMS(tail.TotalMS))
		if growing {
			ev += fmt.Sprintf(" The queue grows over the run: mean wait %s in the first quarter, %s in the last.",
				fmtMS(q0), fmtMS(q1))
		}
	} else {
		// No server split: infer queueing from TTFT growing while arrivals outpace completions.
		t0, t1 := w0, w1
		nums["ttft_first_quarter_ms"], nums["ttft_last_quarter_ms"] = t0, t1
		if !(overloaded && t1 > 2*t0) {
			return Finding{}, false
		}
		ev = fmt.Sprintf("%sThe server gave no stage split, but TTFT grows from a mean of %s in the first "+
			"quarter of the run to %s in the last while requests arrive faster than they complete: "+
			"requests are waiting in a queue.", prefix(why), fmtMS(t0), fmtMS(t1))
	}
	sev := "warning"
	first := fmt.Sprintf("keep the offered rate below the measured capacity (%s req/s) or scale out replicas", num(capacity))
	if overloaded {
		sev = "critical"
		ev += overloadEv
		ev += fmt.Sprintf(" Measured capacity: %s req/s (%s).", num(capacity), capBasis)
	} else {
		// Not overloaded on average: the queue comes from bursts.
		ev += fmt.Sprintf(" On average the server kept up (offered %s req/s, completed %s req/s), so the "+
			"queue builds in bursts of arrivals.", num(s.OfferedRPS), num(s.CompletionRPS))
		first = "headroom for bursts: more replicas at peak, or smoother arrivals upstream"
	}
	return Finding{
		Severity: sev, Title: "TTFT is dominated by waiting in the server's queue",
		Evidence: ev, Numbers: nums,
		Remedies: []string{
			first,
			"admission control or load shedding (answer 429 early instead of queueing past the SLO)",
			"priority scheduling for latency-sensitive requests",
		},
	}, true
}

// rulePrefillBound: TTFT's tail is mostly prefill, and TTFT rises with the
// prompt length.
func rulePrefillBound(a *analysis, rep *Report) (Finding, bool) {
	why, ok := concern(rep, latency.TTFT, latency.TTFTIntended)
	if !ok || len(a.ok) < 8 {
		return Finding{}, false
	}
	tail := group(rep.TTFTSplit, "p95+")
	split := rep.Summary.ServerSplit*2 >= rep.Summary.Succeeded
	var xs, ys []float64
	for _, i := range a.ok {
		r := &a.rows[i]
		y, ok := metricValue(r, "ttft")
		if !ok {
			continue
		}
		if split && r.hasServer() {
			y = r.prefill
		}
		xs, ys = append(xs, float64(r.input)), append(ys, msf(float64(y)))
	}
	f, ok := linearFit(xs, ys)
	if !ok || f.Slope <= 0 || f.R2 < 0.3 {
		return Finding{}, false
	}
	nums := map[string]float64{"ms_per_1k_input": 1000 * f.Slope, "r2": f.R2}
	var ev string
	if split {
		if tail == nil || tail.Largest != string(latency.StagePrefill) || tail.share(latency.StagePrefill) < 0.4 {
			return Finding{}, false
		}
		nums["prefill_share_p95"] = tail.share(latency.StagePrefill)
		ev = fmt.Sprintf("%sPrefill is the largest TTFT term in the tail: %.0f%% of TTFT above its P95 "+
			"(mean %s of %s). Prefill rises with the prompt: %.1f ms per 1k input tokens (R² %.2f, %d requests).",
			prefix(why), 100*tail.share(latency.StagePrefill), fmtMS(tail.meanMS(latency.StagePrefill)),
			fmtMS(tail.TotalMS), 1000*f.Slope, f.R2, f.N)
	} else {
		if f.R2 < 0.5 {
			return Finding{}, false
		}
		ev = fmt.Sprintf("%sThe server gave no stage split, but TTFT rises with the prompt: %.1f ms per 1k "+
			"input tokens (R² %.2f, %d requests), the signature of prefill.", prefix(why), 1000*f.Slope, f.R2, f.N)
	}
	remedies := []string{"chunked prefill (bounds the TTFT cost of one long prompt and its effect on others)",
		"shorter prompts (trim history, retrieval and system text)", "more compute per replica (prefill is compute-bound)"}
	shared, cached := a.sharedPrefix()
	nums["shared_prefix_share"], nums["cached_share"] = shared, cached
	switch {
	case cached > 0:
		ev += fmt.Sprintf(" The server reported %.0f%% of input tokens as served from its prefix cache", 100*cached)
		if shared > 0.05 {
			ev += fmt.Sprintf("; %.0f%% repeat the session's previous turn", 100*shared)
		}
		ev += "."
		remedies = append([]string{fmt.Sprintf("prefix caching is on and served %.0f%% of input tokens: put the "+
			"shared part (system prompt, history) first and route a session to the same replica to raise it",
			100*cached)}, remedies...)
	case shared > 0.05:
		ev += fmt.Sprintf(" %.0f%% of input tokens repeat the session's previous turn, and the server "+
			"reported none as cached.", 100*shared)
		remedies = append([]string{fmt.Sprintf("prefix caching: %.0f%% of input tokens are a prefix shared "+
			"with an earlier turn", 100*shared)}, remedies...)
	default:
		remedies = append(remedies, "prefix caching, if requests share a system prompt or history "+
			"(nothing in this run's records shows a shared prefix)")
	}
	return Finding{Severity: "warning", Title: "TTFT is dominated by prefill and grows with prompt length",
		Evidence: ev, Numbers: nums, Remedies: remedies}, true
}

// sharedPrefix estimates the share of input tokens that repeat a session's
// previous turn (its input plus output), and the share the server said it
// had cached.
func (a *analysis) sharedPrefix() (shared, cached float64) {
	type turn struct{ turn, in, out int32 }
	sessions := map[int64][]turn{}
	var input, cachedTok float64
	for i := range a.rows {
		r := &a.rows[i]
		input += float64(r.input)
		cachedTok += float64(r.cached)
		if r.session != 0 && r.ok() {
			sessions[r.session] = append(sessions[r.session], turn{r.turn, r.input, r.output})
		}
	}
	if input == 0 {
		return 0, 0
	}
	var rep float64
	for _, ts := range sessions {
		slices.SortFunc(ts, func(x, y turn) int { return int(x.turn - y.turn) })
		for i := 1; i < len(ts); i++ {
			rep += float64(min(ts[i].in, ts[i-1].in+ts[i-1].out))
		}
	}
	return rep / input, cachedTok / input
}

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
	itl := a.dist(rep, "itl")
	if itl == nil || itl.P50 <= 0 {
		return Finding{}, false
	}
	thr := int64(max(4*itl.P50, 1) * 1e6)
	// Stalls, and the prefills long enough to explain one (at least half
	// the stall threshold): windows [first token − prefill, first token].
	type iv struct{ lo, hi int64 }
	var w []iv
	var stallLens []int64
	var lo0, hi0 int64 = math.MaxInt64, 0
	for _, i := range a.ok {
		r := &a.rows[i]
		lo0, hi0 = min(lo0, r.sent), max(hi0, r.end)
		if r.hasServer() && r.prefill >= thr/2 && r.firstTok > 0 {
			w = append(w, iv{r.firstTok - r.prefill, r.firstTok})
		}
		if r.stall >= thr {
			stallLens = append(stallLens, r.stall)
		}
	}
	stalls := len(stallLens)
	if stalls < 3 || float64(stalls) < 0.01*float64(len(a.ok)) || hi0 <= lo0 || len(w) == 0 {
		return Finding{}, false
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
	// Chance: the share of start instants at which a stall of the median
	// length would overlap some prefill (windows widened by that length).
	wide := make([]iv, len(w))
	for k, x := range w {
		wide[k] = iv{x.lo - medStall, x.hi}
	}
	var covered int64
	for _, x := range union(wide) {
		covered += x.hi - x.lo
	}
	overlapping := 0
	for _, i := range a.ok {
		r := &a.rows[i]
		if r.stall < thr {
			continue
		}
		s0, s1 := r.stallAt, r.stallAt+r.stall
		k, _ := slices.BinarySearchFunc(u, s1, func(x iv, t int64) int { return cmpInt64(x.lo, t) })
		// u[k-1] is the last window starting before the stall ends.
		if k > 0 && u[k-1].hi > s0 {
			overlapping++
		}
	}
	frac := float64(overlapping) / float64(stalls)
	base := min(float64(covered)/float64(hi0-lo0), 1)
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

// ruleOutsideModel: a large share of E2E is spent outside the model —
// network, connection set-up, the gateway, the end of the stream.
func ruleOutsideModel(a *analysis, rep *Report) (Finding, bool) {
	if rep.Summary.ServerSplit*2 < rep.Summary.Succeeded || rep.Decomposition == nil {
		return Finding{}, false
	}
	outside := []latency.Stage{latency.StageConnect, latency.StageSend, latency.StageGateway,
		latency.StageNetwork, latency.StageStreamTail}
	var best Finding
	found := false
	for _, gname := range []string{"median", "p95+"} {
		g := group(rep.Decomposition, gname)
		if g == nil {
			continue
		}
		var share float64
		top, topShare := latency.Stage(""), 0.0
		var parts []string
		for _, st := range outside {
			s := g.share(st)
			share += s
			if s > topShare {
				top, topShare = st, s
			}
			if s >= 0.01 {
				parts = append(parts, fmt.Sprintf("%s %s (%.0f%%)", st, fmtMS(g.meanMS(st)), 100*s))
			}
		}
		if share < 0.2 || found {
			continue
		}
		found = true
		best = Finding{Severity: "warning", Title: "Much of the latency is spent outside the model",
			Numbers: map[string]float64{"outside_share": share, "largest_outside_share": topShare},
			Evidence: fmt.Sprintf("%.0f%% of E2E in the %s group (mean %s) is outside the server's queue, "+
				"prefill and decode: %s. The largest is %s.", 100*share, gname, fmtMS(g.TotalMS),
				strings.Join(parts, ", "), top),
			Remedies: outsideRemedies(top)}
	}
	return best, found
}

func outsideRemedies(top latency.Stage) []string {
	switch top {
	case latency.StageConnect:
		return []string{"reuse connections (keep-alive, HTTP/2), warm connection pools", "terminate TLS closer to the client"}
	case latency.StageGateway:
		return []string{"profile the gateway: its policy, auth and queue time are on every request's path"}
	case latency.StageStreamTail:
		return []string{"check post-processing after the last token (detokenization, filters, usage accounting)",
			"flush each event as it is produced (no response buffering in proxies)"}
	default:
		return []string{"move the client closer to the server (network transit both ways)",
			"check the HTTP frontend and tokenization time (API server CPU)",
			"disable buffering in proxies and load balancers between client and server"}
	}
}

// ruleErrors: failed requests, by kind.
func ruleErrors(a *analysis, rep *Report) (Finding, bool) {
	s := rep.Summary
	if s.Failed == 0 {
		return Finding{}, false
	}
	rate := float64(s.Failed) / float64(s.Requests)
	sev := "warning"
	if rate >= 0.01 {
		sev = "critical"
	}
	ev := fmt.Sprintf("%d of %d requests failed (%.1f%%): %s.", s.Failed, s.Requests, 100*rate,
		strings.TrimSuffix(strings.TrimPrefix(errorList(s.Errors), " ("), ")"))
	var rem []string
	if s.Errors[latency.ErrTimeout] > 0 {
		rem = append(rem, "timeouts: the server is overloaded or stalled; lower the load or raise capacity")
	}
	if s.Errors[latency.ErrRateLimited] > 0 {
		rem = append(rem, "429s: the server sheds load; the offered rate is above what it admits")
	}
	if s.Errors[latency.ErrHTTP5xx]+s.Errors[latency.ErrServer]+s.Errors[latency.ErrStreamCut]+s.Errors[latency.ErrReset] > 0 {
		rem = append(rem, "server errors and cut streams: check the server's logs (OOM, preemption, crashes)")
	}
	if s.Errors[latency.ErrConnect] > 0 {
		rem = append(rem, "connection failures: check the address, TLS and the server's accept queue")
	}
	if s.Errors[latency.ErrHTTP4xx]+s.Errors[latency.ErrInvalidEvent] > 0 {
		rem = append(rem, "4xx and invalid events: the requests or the server's stream format are wrong")
	}
	return Finding{Severity: sev, Title: "Requests failed", Evidence: ev, Remedies: rem,
		Numbers: map[string]float64{"failed": float64(s.Failed), "error_rate": rate}}, true
}

// ruleStalls: token streams that stop for far longer than a decode step —
// preemption, swapping, or a blocked server.
func ruleStalls(a *analysis, rep *Report) (Finding, bool) {
	itl := a.dist(rep, "itl")
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

// ruleClientBottleneck: the load generator could not keep its schedule or
// its own overhead is a large part of what it measured: the run's numbers
// describe the client, not the server. Its own warnings alone, when the lag
// they describe is small against the latencies measured, make a warning
// rather than a verdict on the run.
func ruleClientBottleneck(a *analysis, rep *Report) (Finding, bool) {
	var strong, soft []string
	nums := map[string]float64{}
	ttft := a.dist(rep, "ttft")
	cq := a.dist(rep, "client_queue")
	if cq != nil && ttft != nil {
		nums["client_queue_p99_ms"], nums["ttft_p50_ms"] = cq.P99, ttft.P50
		if cq.P99 > 10 && cq.P99 > 0.1*ttft.P50 {
			strong = append(strong, fmt.Sprintf("requests left the client late: P99 client queue (schedule "+
				"lag) %s, %.0f%% of the median TTFT (%s)", fmtMS(cq.P99), 100*cq.P99/ttft.P50, fmtMS(ttft.P50)))
		}
	}
	for _, run := range a.runs {
		if run.OverheadFloor > 0 && ttft != nil && ms(int64(run.OverheadFloor)) > 0.1*ttft.P50 {
			nums["overhead_floor_ms"] = ms(int64(run.OverheadFloor))
			strong = append(strong, fmt.Sprintf("the client's own overhead floor is %s, over 10%% of the "+
				"median TTFT (%s)", dur(run.OverheadFloor), fmtMS(ttft.P50)))
		}
		for _, w := range run.Warnings {
			soft = append(soft, "bench warned: "+w)
		}
	}
	if len(strong) > 0 {
		return Finding{Severity: "critical", Title: "The client was a bottleneck: this run is not trustworthy",
			Evidence: strings.Join(append(strong, soft...), "; ") + ". Latencies include the load generator's own delays.",
			Numbers:  nums,
			Remedies: []string{"run the load generator on its own machine or with more CPU",
				"lower the request rate or the number of workers", "check in-flight caps and connection limits"}}, true
	}
	if len(soft) == 0 {
		return Finding{}, false
	}
	ev := strings.Join(soft, "; ") + "."
	if cq != nil && ttft != nil && ttft.P50 > 0 {
		ev += fmt.Sprintf(" The P99 client queue (%s) is %.1f%% of the median TTFT (%s), so the "+
			"latencies measured are still the server's.", fmtMS(cq.P99), 100*cq.P99/ttft.P50, fmtMS(ttft.P50))
	}
	return Finding{Severity: "info", Title: "The load generator doubted its own run", Evidence: ev,
		Numbers:  nums,
		Remedies: []string{"give the load generator more CPU, or lower the rate, before trusting small latencies"}}, true
}
