package report

import (
	"fmt"
	"slices"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// ruleReasoningPhase finds a reasoning model's thinking, not prefill or the
// queue, setting the time to the first answer token: over the requests
// that reasoned, in the tail of ttft_answer (above its P95), the reasoning
// phase (first reasoning token → first answer token) is at least half of
// ttft_answer. TTFT (the first token of any kind) does not see it.
func ruleReasoningPhase(a *analysis, rep *Report) (Finding, bool) {
	why, ok := concern(rep, latency.TTFTAnswer)
	if !ok || !a.reasons() {
		return Finding{}, false
	}
	var answer []int64
	for _, i := range a.ok {
		if r := &a.rows[i]; r.firstReason != 0 && r.firstTok > r.firstReason {
			answer = append(answer, r.firstTok-r.sent)
		}
	}
	if len(answer) < 3 {
		return Finding{}, false
	}
	slices.Sort(answer)
	p95 := stats.Percentile(answer, 95)
	var phase, total float64
	var think, perTok []int64
	for _, i := range a.ok {
		r := &a.rows[i]
		if r.firstReason == 0 || r.firstTok <= r.firstReason {
			continue
		}
		think = append(think, int64(r.reasoning))
		if r.reasoning > 0 {
			perTok = append(perTok, (r.firstTok-r.firstReason)/int64(r.reasoning))
		}
		if r.firstTok-r.sent >= p95 {
			phase += float64(r.firstTok - r.firstReason)
			total += float64(r.firstTok - r.sent)
		}
	}
	if total == 0 || phase/total < 0.5 {
		return Finding{}, false
	}
	share := phase / total
	slices.Sort(think)
	slices.Sort(perTok)
	nums := map[string]float64{"reasoning_share": share, "p95_ttft_answer_ms": ms(p95),
		"reasoning_tokens_p50": float64(stats.Percentile(think, 50)), "reasoning_tokens_p99": float64(stats.Percentile(think, 99))}
	ev := fmt.Sprintf("%sThe reasoning phase, not prefill, sets the time to the first answer token: in the tail "+
		"(above P95 %s) %.0f%% of it is the model's reasoning (first reasoning token → first answer token). "+
		"Reasoning tokens: P50 %d, P99 %d", prefix(why), fmtMS(ms(p95)), 100*share,
		stats.Percentile(think, 50), stats.Percentile(think, 99))
	if len(perTok) > 0 {
		step := stats.Percentile(perTok, 50)
		nums["ms_per_reasoning_token"] = ms(step)
		ev += fmt.Sprintf(", at %.1f ms each", ms(step))
	}
	ev += ". TTFT (the first token of any kind) does not include it."
	sev := SeverityWarning
	if why != "" {
		sev = SeverityCritical
	}
	return Finding{Severity: sev, Title: "A long reasoning phase dominates the time to the first answer token",
		Evidence: ev, Numbers: nums, Remedies: []string{
			"bound the reasoning (a thinking budget or lower reasoning effort: fewer reasoning tokens before the answer)",
			"a faster decode step, which every reasoning token pays (speculative decoding, FP8 weights and KV cache, a smaller batch)",
			"stream the reasoning to the user and judge TTFT, not ttft_answer, if they see it",
		}}, true
}
