package report

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// engineStages are the inference server's own stages: the model's work,
// not the application's.
var engineStages = map[string]bool{
	string(latency.TimingFrontend): true, string(latency.StageServerQueue): true, string(latency.StagePrefill): true,
	string(latency.StageDecode): true, string(latency.TimingFault): true, latency.PartUnattributed: true,
	// a decode instance's stages of a disaggregated request
	string(latency.TimingKVTransfer): true, string(latency.TimingDecodeQueue): true, string(latency.TimingFirstDecode): true,
}

// appStage says whether a part is an application's own stage: any stage
// of a hop other than the client, a gateway and the server (tokentrace
// app's retrieval, a service's tool calls), and a stage the server names
// that is none of an engine's (a RAG service answering directly). Its
// writes blocked on the client and its reading of the request are not:
// no lever of the application shortens them.
func appStage(s StageShare) bool {
	switch {
	case s.Hop == "" || strings.Contains(s.Hop, "→"), s.Hop == string(latency.HopClient), s.Hop == string(latency.HopGateway),
		s.Hop == string(latency.HopPrefill):
		return false
	case s.Stage == latency.PartUnattributed, s.Stage == string(latency.TimingBackpressure), s.Stage == "in":
		return false
	case s.Hop == string(latency.HopServer):
		return !engineStages[s.Stage]
	}
	return true
}

// minAppShare is the share of a tail's mean at or above which an
// application stage that is its largest term dominates it.
const minAppShare = 0.3

// ruleAppStage: an application stage (retrieval, rerank, a guardrail, a
// tool call) is the largest term of TTFT's or E2E's tail: the model is
// not what to tune. The finding says the stage's share, how it moves with
// load and with the prompt's length, and the levers for that kind of
// stage.
func ruleAppStage(a *analysis, rep *Report) (Finding, bool) {
	for _, m := range []struct {
		metric latency.Metric
		tail   *StageGroup
		median *StageGroup
		d      *Decomposition
	}{
		{latency.TTFT, a.ttftTail(rep), group(rep.TTFTSplit, "median"), rep.TTFTSplit},
		{latency.E2E, a.tail(rep.Decomposition), group(rep.Decomposition, "median"), rep.Decomposition},
	} {
		why, ok := concern(rep, m.metric, m.metric+"_intended")
		if !ok || m.tail == nil || len(a.ok) < 8 {
			continue
		}
		top, found := largestApp(m.tail)
		if !found || top.Share < minAppShare || top.Stage != m.tail.Largest || top.Hop != m.tail.LargestHop {
			continue
		}
		return a.appFinding(why, m.metric, top, m.tail, m.median, m.d), true
	}
	return Finding{}, false
}

// largestApp is the application stage with the largest mean in g.
func largestApp(g *StageGroup) (StageShare, bool) {
	var best StageShare
	found := false
	for _, s := range g.Stages {
		if appStage(s) && (!found || s.MeanMS > best.MeanMS) {
			best, found = s, true
		}
	}
	return best, found
}

// appFinding words the finding on stage s of metric's tail.
func (a *analysis) appFinding(why string, metric latency.Metric, s StageShare, tail, median *StageGroup, d *Decomposition) Finding {
	nums := map[string]float64{"stage_share_tail": s.Share, "stage_tail_ms": s.MeanMS}
	ev := fmt.Sprintf("%sApplication stage %s (reported by hop %s) is the largest term of %s in the tail: %.0f%% %s (mean %s of %s).",
		prefix(why), s.Stage, s.Hop, metric, 100*s.Share, tailWords(tail), fmtMS(s.MeanMS), fmtMS(tail.TotalMS))
	if median != nil {
		for _, ms := range median.Stages {
			if ms.Hop == s.Hop && ms.Stage == s.Stage {
				nums["stage_share_median"] = ms.Share
				ev += fmt.Sprintf(" At the median it is %.0f%% (%s of %s).", 100*ms.Share, fmtMS(ms.MeanMS), fmtMS(median.TotalMS))
			}
		}
	}
	k, ok := a.paths.index[partKey{s.Hop, s.Stage}]
	if ok {
		ev += a.appLoadWords(k, d.Of == latency.TTFTIntended, nums)
		ev += a.appPromptWords(k, d.Of == latency.TTFTIntended, nums)
	}
	return Finding{Severity: SeverityWarning, Title: fmt.Sprintf("%s is dominated by the application's %s", metric, s.Stage),
		Evidence: ev, Numbers: nums, Remedies: appRemedies(s.Stage)}
}

// partValue is row w's value of part k (E2E, or TTFT).
func (a *analysis) partValue(w *row, k uint16, ttft bool) int64 {
	var v int64
	a.paths.parts(w, func(key uint16, e2e, t int64) {
		if key == k {
			v = e2e
			if ttft {
				v = t
			}
		}
	})
	return v
}

// appLoadWords says how the stage moves with load: between the sweep's
// lowest and highest offered rates, or else between the requests sent
// with fewer and with more requests in flight.
func (a *analysis) appLoadWords(k uint16, ttft bool, nums map[string]float64) string {
	inflight := a.inFlightAtSend()
	lo, hi := slices.Min(inflight), slices.Max(inflight)
	if lo == hi {
		return fmt.Sprintf(" Load was steady (%d requests in flight at each send), so how it grows with load is not measured here.", lo)
	}
	cut := (lo + hi) / 2
	var s0, s1 float64
	var n0, n1 int
	for j, i := range a.ok {
		v := float64(a.partValue(&a.rows[i], k, ttft))
		if inflight[j] <= cut {
			s0, n0 = s0+v, n0+1
		} else {
			s1, n1 = s1+v, n1+1
		}
	}
	if n0 == 0 || n1 == 0 {
		return ""
	}
	m0, m1 := msf(s0/float64(n0)), msf(s1/float64(n1))
	nums["stage_low_load_ms"], nums["stage_high_load_ms"] = m0, m1
	verb := "holds steady"
	switch {
	case m1 > 1.5*m0 && m1-m0 > 1:
		verb = "grows with load"
	case m0 > 1.5*m1 && m0-m1 > 1:
		verb = "falls with load"
	}
	return fmt.Sprintf(" It %s: mean %s for the %d requests sent with at most %d in flight, %s for the %d sent with more.",
		verb, fmtMS(m0), n0, cut, fmtMS(m1), n1)
}

// inFlightAtSend is, for each successful request (a.ok's order), how many
// successful requests had been sent and had not ended when it was sent.
func (a *analysis) inFlightAtSend() []int {
	sends, ends := make([]int64, len(a.ok)), make([]int64, len(a.ok))
	for j, i := range a.ok {
		sends[j], ends[j] = a.rows[i].sent, a.rows[i].end
	}
	slices.Sort(sends)
	slices.Sort(ends)
	out := make([]int, len(a.ok))
	for j, i := range a.ok {
		t := a.rows[i].sent
		s, _ := slices.BinarySearch(sends, t)  // sent before t
		e, _ := slices.BinarySearch(ends, t+1) // ended at or before t
		out[j] = max(0, s-e)
	}
	return out
}

// appPromptWords says whether the stage scales with the prompt's length:
// a least-squares fit on the input tokens.
func (a *analysis) appPromptWords(k uint16, ttft bool, nums map[string]float64) string {
	var xs, ys []float64
	for _, i := range a.ok {
		w := &a.rows[i]
		xs = append(xs, float64(w.input))
		ys = append(ys, msf(float64(a.partValue(w, k, ttft))))
	}
	f, ok := linearFit(xs, ys)
	if !ok {
		return " Every prompt had the same length, so whether it scales with the prompt is not measured here."
	}
	nums["stage_ms_per_1k_input"], nums["stage_r2_input"] = 1000*f.Slope, f.R2
	if f.Slope > 0 && f.R2 >= 0.5 {
		return fmt.Sprintf(" It scales with the prompt: %.1f ms per 1k input tokens (R² %.2f).", 1000*f.Slope, f.R2)
	}
	return fmt.Sprintf(" It does not scale with the prompt's length (%.1f ms per 1k input tokens, R² %.2f).", 1000*f.Slope, f.R2)
}

// appRemedies are the levers for an application stage, by what it is
// called where the name says (latency remedies: parallel retrieval calls,
// streaming output checks, caching, asynchronous post-processing).
func appRemedies(stage string) []string {
	has := func(words ...string) bool {
		for _, w := range words {
			if strings.Contains(strings.ToLower(stage), w) {
				return true
			}
		}
		return false
	}
	switch {
	case has("retriev", "search", "vector", "embed", "lookup", "fetch"):
		return []string{"make the retrieval calls in parallel: the stage then costs its slowest call, not their sum",
			"cache retrieval results for repeated questions (and embeddings of repeated queries)",
			"query fewer sources, or set a per-source deadline and answer with what has arrived"}
	case has("rerank", "rank", "score"):
		return []string{"rerank fewer candidates, or with a smaller reranker",
			"cache rankings for repeated questions", "overlap reranking with the retrieval calls still running"}
	case has("guard", "moderat", "safety", "filter", "check", "policy"):
		return []string{"stream the output check (check each piece as it is written) instead of blocking until the answer is whole",
			"run input checks in parallel with retrieval rather than before it", "a cheaper check, or cache verdicts on repeated text"}
	case has("tool", "function", "call", "agent"):
		return []string{"make independent tool calls in parallel", "cache tool results that do not change between calls",
			"give each tool a deadline and answer without the slow ones"}
	case has("post", "format", "render", "log", "audit", "store", "persist"):
		return []string{"move post-processing off the response path (asynchronous: after the answer is sent, or in a queue)",
			"stream the answer while post-processing runs beside it"}
	case has("prompt", "template", "context"):
		return []string{"cache assembled prompts and templates", "trim what goes into the prompt"}
	}
	return []string{"profile the stage: run its independent calls in parallel, cache its results, or move it off the response path (asynchronously)"}
}
