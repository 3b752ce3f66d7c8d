package report

import (
	"fmt"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// loadMinNS is the least model load ruleModelLoad names: an engine that
// finds its model in memory reports well under a millisecond.
const loadMinNS = 20e6

// ruleModelLoad: a request's TTFT is mostly the engine loading the model
// before its prefill (the evidence's load time: Ollama's load_duration),
// as on the first request after the server starts or after it unloaded
// an idle model.
func ruleModelLoad(a *analysis, rep *Report) (Finding, bool) {
	why, ok := concern(rep, latency.TTFT, latency.TTFTIntended, latency.E2E, latency.E2EIntended)
	if !ok {
		return Finding{}, false
	}
	var first *row
	n := 0
	var loadSum int64
	start := int64(-1)
	for _, i := range a.byTime() {
		r := &a.rows[i]
		if start < 0 {
			start = r.sent
		}
		ttft := r.firstOut() - r.sent
		if r.load < loadMinNS || 2*r.load < ttft {
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
		"%s into the run, had a TTFT of %s, of which %s was the model's load (its load_duration) and %s its "+
		"prompt processing. The model was not in memory: the first request after the server started, or the first "+
		"after it unloaded the model for idleness (%s) or to make room for another.",
		prefix(why), n, len(a.ok), who, fmtMS(ms(first.sent-start)), fmtMS(ms(ttft)), fmtMS(ms(first.load)),
		fmtMS(ms(first.prefill)), setting)
	return Finding{Severity: SeverityWarning, Title: "A request's TTFT is the engine loading the model", Evidence: ev,
		Numbers: map[string]float64{"loaded_requests": float64(n), "first_load_ms": ms(first.load),
			"first_ttft_ms": ms(ttft), "mean_load_ms": ms(loadSum / int64(n))},
		Remedies: []string{"keep the model loaded between requests: " + setting + " longer than the gaps in traffic",
			"load it before traffic arrives: a warm-up request at start (bench --warmup) or a request with no prompt",
			"memory for every model served at once (OLLAMA_MAX_LOADED_MODELS), so that one does not unload another"}}, true
}
