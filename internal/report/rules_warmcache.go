package report

import "fmt"

// Thresholds of ruleWarmCache (docs/report.md): the server served at least
// warmCacheMin of the prompt tokens from its prefix cache, warmCacheGap
// more than the run's prompts share with one another.
const (
	warmCacheMin = 0.3
	warmCacheGap = 0.25
)

// ruleWarmCache: the server's prefix cache served far more of the prompts
// than this run's own sharing explains, so it was warm before the run
// (earlier runs sent the same prompts): its TTFT is not a cold server's.
func ruleWarmCache(a *analysis, rep *Report) (Finding, bool) {
	s := rep.Summary
	if s.InputTokens == 0 {
		return Finding{}, false
	}
	shared := float64(s.SharedPrefixTokens) / float64(s.InputTokens)
	cached, from := float64(s.CachedTokens)/float64(s.InputTokens), "the answers' cached_tokens"
	if c, ok := a.ev.prefixCacheShare(); ok && c > cached {
		cached, from = c, "the server's prefix-cache counters"
	}
	if cached < warmCacheMin || cached-shared < warmCacheGap {
		return Finding{}, false
	}
	ev := fmt.Sprintf("The server served %.1f%% of the prompt tokens from its prefix cache (%s), "+
		"while this run's prompts share only %.1f%% with earlier requests of the run: the cache held them before it began "+
		"(an earlier run sent the same prompts), so TTFT and prefill are a warm server's, not a fresh one's.",
		100*cached, from, 100*shared)
	return Finding{Severity: SeverityWarning, Title: "Prefix cache warm from before the run", Evidence: ev,
		Remedies: []string{"measure a fresh cache: run with a new --seed (bench draws one per run unless --seed is given) or restart the server first",
			"compare runs only with the same cache state (report --compare lists the cached share of each)"},
		Numbers: map[string]float64{"cached_share": cached, "shared_share": shared}}, true
}
