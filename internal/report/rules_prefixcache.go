package report

import (
	"fmt"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// Thresholds of rulePrefixCacheUnused (docs/report.md): the run's prompts
// share at least prefixUnusedMin of their tokens with earlier requests,
// the server served under half of that from its prefix cache, and, where
// the server split TTFT, prefill is at least prefixUnusedPrefill of the
// TTFT tail.
const (
	prefixUnusedMin     = 0.3
	prefixUnusedPrefill = 0.25
)

// rulePrefixCacheUnused: the prompts share much of their text and the
// server computed it again — prefix caching off (or not serving). The
// prefill-bound finding says the same when it fires; this one names the
// lever when TTFT is not (yet) dominated by prefill, so the diagnosis and
// what-if's prefix-caching prediction agree.
func rulePrefixCacheUnused(a *analysis, rep *Report) (Finding, bool) {
	why, ok := concern(rep, latency.TTFT, latency.TTFTIntended)
	if !ok || len(a.ok) < 8 {
		return Finding{}, false
	}
	u := a.prefixUse()
	caching, known := a.ev.on("enable_prefix_caching")
	if u.shared < prefixUnusedMin || u.cached >= u.shared/2 || known && caching && a.family() != latency.EngineLlamaCpp {
		return Finding{}, false
	}
	if _, said := rulePrefillBound(a, rep); said {
		return Finding{}, false // its remedies name prefix caching already
	}
	nums := map[string]float64{"shared_prefix_share": u.shared, "cached_share": u.cached}
	what := "are a prefix shared with earlier requests"
	if u.sessions {
		what = "repeat the session's previous turn"
	}
	ev := fmt.Sprintf("%s%.0f%% of input tokens %s, and the server reported %s as served from its prefix cache",
		prefix(why), 100*u.shared, what, cachedWords(u.cached))
	if known {
		ev += fmt.Sprintf("; its configuration says prefix caching is %s", onOff(caching))
	}
	ev += "."
	if tail := a.ttftTail(rep); tail != nil && rep.Summary.ServerSplit*2 >= rep.Summary.Succeeded {
		share := tail.share(latency.StagePrefill)
		if share < prefixUnusedPrefill {
			return Finding{}, false // prefill is too small a part of TTFT for the cache to matter
		}
		nums["prefill_share_p95"] = share
		ev += fmt.Sprintf(" Prefill is %.0f%% of TTFT %s (mean %s of %s): the shared part is computed again for every request.",
			100*share, tailWords(tail), fmtMS(tail.meanMS(latency.StagePrefill)), fmtMS(tail.TotalMS))
	}
	sev := SeverityInfo
	if why != "" {
		sev = SeverityWarning
	}
	return Finding{Severity: sev, Title: "Prompts share a prefix the server computes again", Evidence: ev,
		Numbers: nums, Remedies: []string{a.prefixCachingLever(u, caching, known)}}, true
}
