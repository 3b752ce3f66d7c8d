package report

import (
	"fmt"
	"slices"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// rulePrefillBound: TTFT's tail is mostly prefill. With the server's split
// that alone decides (a run of equal prompts has no trend to fit); the fit
// of prefill on the prompt's length, when the lengths vary, gives its
// cost per 1k tokens. Without a split, only a clear trend of TTFT with the
// prompt's length says prefill. The remedies weigh what the prompts share
// against what the server's cache served and its configuration.
func rulePrefillBound(a *analysis, rep *Report) (Finding, bool) {
	why, ok := concern(rep, latency.TTFT, latency.TTFTIntended)
	if !ok || len(a.ok) < 8 {
		return Finding{}, false
	}
	split := rep.Summary.ServerSplit*2 >= rep.Summary.Succeeded
	f, fitted := a.prefillFit(split)
	trend := fitted && f.Slope > 0 && f.R2 >= 0.3
	nums := map[string]float64{}
	if trend {
		nums["ms_per_1k_input"], nums["r2"] = 1000*f.Slope, f.R2
	}
	var ev string
	if split {
		// Without a failing SLO the pattern alone decides: a trend with the
		// prompt. Prefill being the largest term of a healthy TTFT is no finding.
		if why == "" && !trend {
			return Finding{}, false
		}
		tail := a.ttftTail(rep)
		if tail == nil || !tail.largestIs(latency.StagePrefill) || tail.share(latency.StagePrefill) < 0.4 {
			return Finding{}, false
		}
		nums["prefill_share_p95"] = tail.share(latency.StagePrefill)
		ev = fmt.Sprintf("%sPrefill is the largest TTFT term in the tail: %.0f%% of TTFT %s (mean %s of %s).",
			prefix(why), 100*tail.share(latency.StagePrefill), tailWords(tail), fmtMS(tail.meanMS(latency.StagePrefill)),
			fmtMS(tail.TotalMS))
		if trend {
			ev += fmt.Sprintf(" Prefill rises with the prompt: %.1f ms per 1k input tokens (R² %.2f, %d requests).",
				1000*f.Slope, f.R2, f.N)
		} else if c, ok := a.prefillCost(); ok {
			nums["ms_per_1k_computed"] = 1000 * c
			ev += fmt.Sprintf(" The server computes prompts at about %.1f ms per 1k tokens (its prefill time over "+
				"the prompt tokens computed beside it, median of %d requests).", 1000*c, len(a.ok))
		}
	} else {
		if !trend || f.R2 < 0.5 {
			return Finding{}, false
		}
		ev = fmt.Sprintf("%sThe server gave no stage split, but TTFT rises with the prompt: %.1f ms per 1k "+
			"input tokens (R² %.2f, %d requests), the signature of prefill.", prefix(why), 1000*f.Slope, f.R2, f.N)
	}
	more, remedies := a.prefillRemedies(nums)
	title := "TTFT is dominated by prefill"
	if trend {
		title += " and grows with prompt length"
	}
	return Finding{Severity: SeverityWarning, Title: title, Evidence: ev + more, Numbers: nums, Remedies: remedies}, true
}

// prefillFit fits prefill (TTFT without a split) on input tokens.
func (a *analysis) prefillFit(split bool) (fit, bool) {
	var xs, ys []float64
	for _, i := range a.ok {
		r := &a.rows[i]
		y, ok := metricValue(r, latency.TTFT)
		if !ok {
			continue
		}
		if split && r.hasServer() {
			y = r.prefill
		}
		xs, ys = append(xs, float64(r.input)), append(ys, msf(float64(y)))
	}
	return linearFit(xs, ys)
}

// prefillCost is the server's prefill cost per prompt token, in ms: per
// request with the server's split, its prefill time over the prompt tokens
// computed (input − cached) by every prefill that shared its window (at
// least half overlapping: a step computes the chunks of several prompts
// at once), median over requests.
func (a *analysis) prefillCost() (float64, bool) {
	var w []interval
	var tok []int32
	for _, i := range a.ok {
		r := &a.rows[i]
		if r.hasServer() && r.prefill > 0 && r.firstTok > 0 {
			w = append(w, interval{r.firstTok - r.prefill, r.firstTok})
			tok = append(tok, max(r.input-r.cached, 0))
		}
	}
	ws := newWindows(w, tok)
	var per []int64 // ns per 1k tokens, for an integer sample
	for _, x := range ws.w {
		if n := ws.tokensBeside(x.lo, x.hi); n > 0 {
			per = append(per, (x.hi-x.lo)*1000/n)
		}
	}
	if len(per) == 0 {
		return 0, false
	}
	slices.Sort(per)
	return msf(float64(stats.Percentile(per, 50))) / 1000, true
}

// prefixUse is what the prompts share and what the server served from its
// prefix cache, as shares of the input tokens.
type prefixUse struct {
	shared   float64 // share of input tokens the workload shares with other requests
	sessions bool    // shared estimated from sessions (records without shared_prefix_tokens)
	cached   float64 // share the server served from its cache (records, else its counters)
}

// prefixUse reads the records' shared_prefix_tokens and cached_tokens;
// records without shared_prefix_tokens (older runs) fall back to the
// session estimate, and without cached_tokens to the server's counters.
func (a *analysis) prefixUse() prefixUse {
	var input, shared, cached float64
	for i := range a.rows {
		r := &a.rows[i]
		input += float64(r.input)
		shared += float64(r.shared)
		cached += float64(r.cached)
	}
	if input == 0 {
		return prefixUse{}
	}
	u := prefixUse{shared: shared / input, cached: cached / input}
	if shared == 0 {
		u.shared, u.sessions = a.sessionShare(input), true
	}
	if cached == 0 {
		if c, ok := a.ev.prefixCacheShare(); ok {
			u.cached = c
		}
	}
	return u
}

// sessionShare estimates the input tokens that repeat a session's previous
// turn (its input plus output), for records that do not say what they share.
func (a *analysis) sessionShare(input float64) float64 {
	type turn struct{ turn, in, out int32 }
	sessions := map[int64][]turn{}
	for i := range a.rows {
		r := &a.rows[i]
		if r.session != 0 && r.ok() {
			sessions[r.session] = append(sessions[r.session], turn{r.turn, r.input, r.output})
		}
	}
	var rep float64
	for _, ts := range sessions {
		slices.SortFunc(ts, func(x, y turn) int { return int(x.turn - y.turn) })
		for i := 1; i < len(ts); i++ {
			rep += float64(min(ts[i].in, ts[i-1].in+ts[i-1].out))
		}
	}
	return rep / input
}

// prefillRemedies words what the prompts share and what the cache served,
// and the levers that fit, leaving out what the server says is on.
func (a *analysis) prefillRemedies(nums map[string]float64) (evidence string, remedies []string) {
	u := a.prefixUse()
	nums["shared_prefix_share"], nums["cached_share"] = u.shared, u.cached
	caching, known := a.ev.on("enable_prefix_caching")
	what := "are a prefix shared with other requests"
	if u.sessions {
		what = "repeat the session's previous turn"
	}
	var rem []string
	switch {
	case u.shared > 0.05 && u.cached < u.shared/2:
		evidence = fmt.Sprintf(" %.0f%% of input tokens %s, and the server reported %s as served from its "+
			"prefix cache", 100*u.shared, what, cachedWords(u.cached))
		rem = []string{a.prefixCachingLever(u, caching, known)}
		if known {
			evidence += fmt.Sprintf("; its configuration says prefix caching is %s", onOff(caching))
		}
		evidence += "."
	case u.cached > 0:
		evidence = fmt.Sprintf(" The server reported %.0f%% of input tokens as served from its prefix cache", 100*u.cached)
		if u.shared > 0.05 {
			evidence += fmt.Sprintf("; %.0f%% %s", 100*u.shared, what)
		}
		evidence += "."
		rem = []string{fmt.Sprintf("prefix caching is on and served %.0f%% of input tokens: put the "+
			"shared part (system prompt, history) first and route a session to the same replica to raise it",
			100*u.cached)}
	}
	if on, known := a.ev.on("enable_chunked_prefill"); !known || !on {
		rem = append(rem, "chunked prefill (bounds the TTFT cost of one long prompt and its effect on others)")
	}
	rem = append(rem, "shorter prompts (trim history, retrieval and system text)",
		"more compute per replica (prefill is compute-bound)")
	if u.shared <= 0.05 && u.cached == 0 && !(known && caching) {
		rem = append(rem, "prefix caching, if requests share a system prompt or history "+
			"(nothing in this run's records shows a shared prefix)")
	}
	return evidence, rem
}

// prefixCachingLever is the first remedy when the prompts share a prefix
// the cache did not serve: turn caching on, or find why it missed.
func (a *analysis) prefixCachingLever(u prefixUse, caching, known bool) string {
	reuse := u.shared - u.cached
	save := ""
	if c, ok := a.prefillCost(); ok {
		var in float64
		for _, i := range a.ok {
			in += float64(a.rows[i].input)
		}
		perReq := c * reuse * in / float64(len(a.ok))
		save = fmt.Sprintf(", about %s less prefill per request at the measured %.1f ms per 1k tokens", fmtMS(perReq), 1000*c)
	}
	switch {
	case a.family() == latency.EngineLlamaCpp:
		return fmt.Sprintf("reuse the shared prompt prefix: llama-server keeps a slot's last prompt when the request "+
			"sends cache_prompt (its default) and reuses shifted chunks with --cache-reuse N; send requests that share "+
			"a prefix to the same slot (id_slot) or replica: %.0f%% of input tokens would be reused instead of "+
			"computed%s", 100*reuse, save)
	case known && caching:
		hint := ""
		if a.ev.has("kv_cache_usage") {
			hint = fmt.Sprintf(" (KV-cache usage peaked at %.0f%%)", 100*a.ev.kvPeak)
		}
		return fmt.Sprintf("prefix caching is on but served only %s of input tokens while %.0f%% are shared: "+
			"give the cache room%s, keep the shared part first and byte-identical, and route requests that share "+
			"a prefix to the same replica (prefix affinity)", cachedWords(u.cached), 100*u.shared, hint)
	case known:
		return fmt.Sprintf("turn on prefix caching (enable_prefix_caching is off): %.0f%% of input tokens would be "+
			"reused from the cache instead of computed%s", 100*reuse, save)
	}
	return fmt.Sprintf("prefix caching (vLLM: --enable-prefix-caching): %.0f%% of input tokens would be reused "+
		"from the cache instead of computed%s", 100*reuse, save)
}

func cachedWords(share float64) string {
	if share == 0 {
		return "none"
	}
	return fmt.Sprintf("%.0f%%", 100*share)
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}
