package report

import (
	"fmt"
	"slices"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// loadMinNS is the least model load ruleModelLoad names: an engine that
// finds its model in memory reports well under a millisecond.
const loadMinNS = 20e6

// ruleModelLoad: a request's TTFT is the engine loading the model before
// its prefill (the evidence's load time: Ollama's load_duration), as on
// the first request after the server starts or after it unloaded an idle
// model: its load is at least loadMinNS, its TTFT exceeds the run's median
// by at least half the load (the load is not hidden in the run's usual
// spread), and the load is the largest part of that excess — at least its
// queue wait and its prefill's (and, for an answer that came whole, its
// decode's) excess over the run's median.
func ruleModelLoad(a *analysis, rep *Report) (Finding, bool) {
	why, ok := concern(rep, latency.TTFT, latency.TTFTIntended, latency.E2E, latency.E2EIntended)
	if !ok || len(a.ok) == 0 {
		return Finding{}, false
	}
	medTTFT := a.median(func(r *row) int64 { return r.firstOut() - r.sent })
	medPrefill := a.median(func(r *row) int64 { return r.prefill })
	medDecode := a.median(func(r *row) int64 { return r.decode })
	var first *row
	n := 0
	var loadSum int64
	start := a.rows[a.byTime()[0]].sent
	for _, i := range a.byTime() {
		r := &a.rows[i]
		excessDecode := int64(0)
		if r.firstTok == 0 {
			excessDecode = r.decode - medDecode // a whole answer's TTFT holds its decode
		}
		if r.load < loadMinNS || 2*(r.firstOut()-r.sent-medTTFT) < r.load || r.load < r.sq ||
			r.load < r.prefill-medPrefill || r.load < excessDecode {
			continue
		}
		if first == nil {
			first = r
		}
		n++
		loadSum += r.load
	}
	if first == nil {
		return Finding{}, false
	}
	who, setting := "the engine", "how long the engine keeps an idle model loaded"
	if a.engine() == latency.EngineOllama {
		who, setting = "Ollama", "OLLAMA_KEEP_ALIVE (5 minutes by default; keep_alive per request, -1 for ever)"
	}
	ttft := first.firstOut() - first.sent
	ev := fmt.Sprintf("%s%d of %d requests waited for %s to load the model before their prompt: the first, sent "+
		"%s into the run, had a TTFT of %s against the run's median of %s; the model's load (its load_duration) "+
		"was %s of it, the largest part, beside its prompt processing's %s (median %s). The model was not in "+
		"memory: the first request after the server started, or the first after it unloaded the model for "+
		"idleness (%s) or to make room for another.",
		prefix(why), n, len(a.ok), who, fmtMS(ms(first.sent-start)), fmtMS(ms(ttft)), fmtMS(ms(medTTFT)),
		fmtMS(ms(first.load)), fmtMS(ms(first.prefill)), fmtMS(ms(medPrefill)), setting)
	return Finding{Severity: SeverityWarning, Title: "A request's TTFT is the engine loading the model", Evidence: ev,
		Numbers: map[string]float64{"loaded_requests": float64(n), "first_load_ms": ms(first.load),
			"first_ttft_ms": ms(ttft), "median_ttft_ms": ms(medTTFT), "mean_load_ms": ms(loadSum / int64(n))},
		Remedies: []string{"keep the model loaded between requests: " + setting + " longer than the gaps in traffic",
			"load it before traffic arrives: a warm-up request at start (bench --warmup) or a request with no prompt",
			"memory for every model served at once (OLLAMA_MAX_LOADED_MODELS), so that one does not unload another"}}, true
}

// median is the nearest-rank median of v over the successful requests.
func (a *analysis) median(v func(*row) int64) int64 {
	xs := make([]int64, 0, len(a.ok))
	for _, i := range a.ok {
		xs = append(xs, v(&a.rows[i]))
	}
	slices.Sort(xs)
	return stats.Percentile(xs, 50)
}
