package report

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// ruleKVCache: the server's counters show its KV cache running out —
// preemptions during the run, or usage at the top — which stalls the
// preempted streams and delays their answers.
func ruleKVCache(a *analysis, rep *Report) (Finding, bool) {
	why, ok := concern(rep, latency.TPOT, latency.ITL, latency.ICL, latency.E2E, latency.E2EIntended,
		latency.TTFT, latency.TTFTIntended)
	if !ok || !a.ev.preempting() {
		return Finding{}, false
	}
	nums := map[string]float64{}
	if a.ev.has("preemptions") {
		nums["preemptions"] = a.ev.preemptions
	}
	if a.ev.has("kv_cache_usage") {
		nums["kv_cache_usage_peak"] = a.ev.kvPeak
	}
	ev := fmt.Sprintf("%sThe server's KV cache ran out: %s (its /metrics). When the cache is full the "+
		"scheduler evicts running requests to be recomputed or swapped back later; each eviction stalls a "+
		"stream and delays its answer.", prefix(why), a.ev.counters())
	if d := rep.dist(latency.ITL); d != nil && d.P50 > 0 {
		ev += fmt.Sprintf(" ITL P50 %s, P99 %s, max %s.", fmtMS(d.P50), fmtMS(d.P99), fmtMS(d.Max))
	}
	return Finding{Severity: SeverityWarning, Title: "The KV cache ran out: requests were preempted", Evidence: ev,
		Numbers: nums, Remedies: a.kvRemedies()}, true
}

// kvRemedies are the levers on a full KV cache, with the server's
// settings where it gives them.
func (a *analysis) kvRemedies() []string {
	if a.family() == latency.EngineLlamaCpp {
		return []string{"leave KV-cache headroom: fewer slots (-np/--parallel), each holding its share of the context (-c)",
			"a larger KV cache: a larger context (-c), a quantized one (--cache-type-k and --cache-type-v q8_0), or more memory",
			"cap max_tokens (n_predict) where answers run long (a long answer holds its cells longest)"}
	}
	seqs := "max_num_seqs"
	if v, ok := a.ev.setting("max_num_seqs"); ok {
		seqs += ", now " + v
	}
	mem := "raise gpu_memory_utilization"
	if v, ok := a.ev.setting("gpu_memory_utilization"); ok {
		mem += " (now " + v + ")"
	}
	kv := "quantize the KV cache (kv_cache_dtype fp8)"
	if v, ok := a.ev.setting("cache_dtype"); ok {
		kv = fmt.Sprintf("quantize the KV cache (kv_cache_dtype fp8; now %s)", v)
	}
	return []string{
		fmt.Sprintf("leave KV-cache headroom: fewer sequences at once (%s)", seqs),
		fmt.Sprintf("a larger KV cache: %s, %s, or more GPUs per replica", mem, kv),
		"cap max_tokens where answers run long (a long answer holds its blocks longest)",
	}
}

// ruleWaves: a closed loop of equal requests moves in waves — every
// request of a wave is sent, prefills and finishes together — so each
// wave is a burst of prefill. That is the benchmark's shape, not the
// traffic a server meets in production.
func ruleWaves(a *analysis, rep *Report) (Finding, bool) {
	conc := 0
	for _, run := range a.runs {
		if run.Mode == "closed" && run.Concurrency > 1 {
			conc = max(conc, run.Concurrency)
		}
	}
	if conc < 2 || len(a.ok) < 3*conc || len(a.sources) > 1 {
		return Finding{}, false
	}
	if cv(a, func(r *row) float64 { return float64(r.input) }) > 0.1 ||
		cv(a, func(r *row) float64 { return float64(r.output) }) > 0.1 {
		return Finding{}, false
	}
	e2e := a.sample(latency.E2E)
	if len(e2e) == 0 {
		return Finding{}, false
	}
	gap := max(int64(time.Millisecond), stats.Percentile(e2e, 50)/20)
	sent := make([]int64, 0, len(a.ok))
	for _, i := range a.ok {
		sent = append(sent, a.rows[i].sent)
	}
	slices.Sort(sent)
	waves, big, inWaves := 1, 0, 0
	size := 1
	flush := func() {
		if size*2 >= conc {
			big++
			inWaves += size
		}
	}
	for k := 1; k < len(sent); k++ {
		if sent[k]-sent[k-1] <= gap {
			size++
			continue
		}
		flush()
		waves, size = waves+1, 1
	}
	flush()
	share := float64(inWaves) / float64(len(sent))
	if big < 3 || share < 0.5 {
		return Finding{}, false
	}
	mean := float64(len(sent)) / float64(waves)
	nums := map[string]float64{"waves": float64(waves), "mean_wave_size": mean, "concurrency": float64(conc),
		"share_in_waves": share, "wave_gap_ms": ms(gap)}
	ev := fmt.Sprintf("A closed loop of %d workers with prompts and answers of equal length: %.0f%% of the "+
		"requests went out in waves (sent within %s of each other; %d waves of %.1f requests on average). Each "+
		"wave is sent together, prefills together and finishes together, so the server sees bursts of prefill "+
		"followed by decode-only steps. This is a property of the benchmark's shape, not of production traffic, "+
		"whose arrivals are spread out: the queueing and interference measured here are the waves'.",
		conc, 100*share, fmtMS(ms(gap)), waves, mean)
	return Finding{Severity: SeverityInfo, Title: "Closed-loop requests move in synchronised waves", Evidence: ev,
		Numbers: nums, Remedies: []string{
			"measure with open-loop arrivals (--rate with Poisson arrivals) for what production sees",
			"draw prompt and answer lengths from a distribution (e.g. lognormal) so the waves break up",
		}}, true
}

// cv is the coefficient of variation of v over successful requests.
func cv(a *analysis, v func(*row) float64) float64 {
	var s, s2 float64
	for _, i := range a.ok {
		x := v(&a.rows[i])
		s += x
		s2 += x * x
	}
	n := float64(len(a.ok))
	mean := s / n
	if mean == 0 {
		return 0
	}
	return math.Sqrt(math.Max(0, s2/n-mean*mean)) / mean
}
