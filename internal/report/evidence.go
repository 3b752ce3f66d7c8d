package report

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tokentrace/tokentrace/internal/results"
)

// evidence is what the server's own /metrics said over the run (run.json's
// server and samples, as bench scraped them): what it exposes, its
// configuration, and the figures the rules reason with. A figure the
// server does not expose is unknown, never zero.
type evidence struct {
	scraped bool   // at least one input has samples with their results.ServerInfo
	engine  string // the engine of the first input that has one
	series  map[string]bool
	config  map[string]string
	// tokenCounters names the token and time counters (results.ServerInfo's
	// TokenCounters) of the first input that has them.
	tokenCounters []string
	errs          []string // why inputs have no samples
	// Over the run (summed over inputs): preemptions and prefix-cache
	// tokens looked up and served, from the first to the last sample.
	preemptions               float64
	prefixQueries, prefixHits float64
	// Peaks over the samples.
	kvPeak, runningPeak, waitingPeak float64
	runningMean, waitingMean         float64
	// waitingShare is the share of the samples with a request waiting;
	// samples how many samples there were.
	waitingShare  float64
	samples       int
	prefixHitRate float64 // the last sample's, for engines with only a rate
	// Over the run, where the server counts them: prompt tokens computed
	// and tokens generated, and (llama.cpp) its summed time on each.
	promptTokens, genTokens   float64
	promptSeconds, genSeconds float64
}

// serverEvidence reads the inputs' run metadata.
func (a *analysis) serverEvidence() *evidence {
	ev := &evidence{series: map[string]bool{}, config: map[string]string{}}
	var runningSum, waitingSum float64
	var n, waitingN int
	for _, run := range a.runs {
		s := run.Server
		if s == nil {
			continue
		}
		if s.Error != "" {
			ev.errs = append(ev.errs, s.Error)
		}
		if len(run.Samples) == 0 {
			continue
		}
		ev.scraped = true
		if ev.engine == "" {
			ev.engine = s.Engine
		}
		for _, f := range s.Series {
			ev.series[f] = true
		}
		if ev.tokenCounters == nil {
			ev.tokenCounters = s.TokenCounters
		}
		for k, v := range s.Config {
			if _, ok := ev.config[k]; !ok {
				ev.config[k] = v
			}
		}
		first, last := run.Samples[0], run.Samples[len(run.Samples)-1]
		ev.preemptions += math.Max(0, last.Preemptions-first.Preemptions)
		ev.prefixQueries += math.Max(0, last.PrefixQueries-first.PrefixQueries)
		ev.prefixHits += math.Max(0, last.PrefixHits-first.PrefixHits)
		ev.prefixHitRate = last.PrefixHitRate
		ev.promptTokens += math.Max(0, last.PromptTokens-first.PromptTokens)
		ev.genTokens += math.Max(0, last.GenerationTokens-first.GenerationTokens)
		ev.promptSeconds += math.Max(0, last.PromptSeconds-first.PromptSeconds)
		ev.genSeconds += math.Max(0, last.GenerationSeconds-first.GenerationSeconds)
		for _, sm := range run.Samples {
			ev.kvPeak = math.Max(ev.kvPeak, sm.KVCacheUsage)
			ev.runningPeak = math.Max(ev.runningPeak, sm.Running)
			ev.waitingPeak = math.Max(ev.waitingPeak, sm.Waiting)
			runningSum += sm.Running
			waitingSum += sm.Waiting
			if sm.Waiting > 0 {
				waitingN++
			}
			n++
		}
	}
	if n > 0 {
		ev.runningMean, ev.waitingMean = runningSum/float64(n), waitingSum/float64(n)
		ev.waitingShare, ev.samples = float64(waitingN)/float64(n), n
	}
	return ev
}

// has says whether the server exposes a figure (scrape's Fig* names:
// running, waiting, kv_cache_usage, preemptions, prefix_cache,
// prefix_hit_rate, tokens, engine_time).
func (ev *evidence) has(fig string) bool { return ev.scraped && ev.series[fig] }

// kvFull is the KV-cache usage from which a cache counts as exhausted.
const kvFull = 0.95

// preempting says whether the counters show the KV cache running out:
// preemptions during the run, or usage at the top of the cache.
func (ev *evidence) preempting() bool {
	return (ev.has("preemptions") && ev.preemptions > 0) || (ev.has("kv_cache_usage") && ev.kvPeak >= kvFull)
}

// noPreemption says whether the counters rule preemption out: none during
// the run and, where the server gives it, KV usage below the top.
func (ev *evidence) noPreemption() bool {
	if !ev.has("preemptions") || ev.preemptions > 0 {
		return false
	}
	return !ev.has("kv_cache_usage") || ev.kvPeak < kvFull
}

// counters describes the preemption and KV figures for evidence text.
func (ev *evidence) counters() string {
	var parts []string
	if ev.has("preemptions") {
		parts = append(parts, fmt.Sprintf("%s preemption(s) during the run", num0(ev.preemptions)))
	}
	if ev.has("kv_cache_usage") {
		parts = append(parts, fmt.Sprintf("KV-cache usage peaked at %.0f%%", 100*ev.kvPeak))
	}
	return strings.Join(parts, ", ")
}

// setting is one configuration value the server exposes; ok is false when
// it does not.
func (ev *evidence) setting(name string) (string, bool) {
	v, ok := ev.config[name]
	return v, ok && v != ""
}

// on reads a boolean setting (vLLM writes Python's True and False).
func (ev *evidence) on(name string) (on, known bool) {
	v, ok := ev.setting(name)
	if !ok {
		return false, false
	}
	b, err := strconv.ParseBool(strings.ToLower(v))
	return b, err == nil
}

// number reads a numeric setting.
func (ev *evidence) number(name string) (float64, bool) {
	v, ok := ev.setting(name)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	return f, err == nil
}

// prefixCacheShare is the share of prompt tokens the server's counters say
// its prefix cache served over the run; ok is false when it gives none.
func (ev *evidence) prefixCacheShare() (float64, bool) {
	switch {
	case ev.has("prefix_cache") && ev.prefixQueries > 0:
		return ev.prefixHits / ev.prefixQueries, true
	case ev.has("prefix_hit_rate"):
		return ev.prefixHitRate, true
	}
	return 0, false
}

// lacking lists what the rules would have read but the run does not
// hold, for the report's notes; nil when nothing is missing or the inputs
// carry no run metadata at all (records alone).
func (ev *evidence) lacking(runs []results.RunInfo) []string {
	if len(runs) == 0 {
		return nil
	}
	if !ev.scraped {
		why := "bench did not read it (run.json has no server samples)"
		if len(ev.errs) > 0 {
			why = ev.errs[0]
		}
		return []string{"no server evidence: " + why + "; preemptions, KV-cache usage, prefix-cache hits and " +
			"the server's configuration are unknown, so the diagnosis cannot rule them in or out"}
	}
	var miss []string
	for _, f := range []struct{ fig, what string }{
		{"preemptions", "preemptions"}, {"kv_cache_usage", "KV-cache usage"}, {"waiting", "requests waiting"},
	} {
		if !ev.series[f.fig] {
			miss = append(miss, f.what)
		}
	}
	if !ev.series["prefix_cache"] && !ev.series["prefix_hit_rate"] {
		miss = append(miss, "prefix-cache hits")
	}
	if len(miss) == 0 {
		return nil
	}
	slices.Sort(miss)
	engine := ev.engine
	if engine == "" {
		engine = "the server"
	}
	return []string{fmt.Sprintf("the server's /metrics (%s) exposes no %s: the diagnosis cannot rule those in or out",
		engine, strings.Join(miss, ", "))}
}

// num0 formats a count.
func num0(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }

// ServerTokens is what the server's own counters say it computed over the
// run (its /metrics, from the first to the last sample bench took): the
// prompt tokens it counted (llama.cpp: those it computed; vLLM, SGLang:
// every prompt token, cached ones included) and the tokens it generated,
// and, where it counts its time on them (llama.cpp), that time per token. Compared with the run's records, it says whether
// the server's counts and the requests' agree (docs/engines.md).
type ServerTokens struct {
	// Engine is the engine whose counters these are.
	Engine string `json:"engine,omitempty"`
	// Counters names the counters read.
	Counters []string `json:"counters"`
	// PromptTokens and GeneratedTokens are the counters' growth over the
	// run.
	PromptTokens    float64 `json:"prompt_tokens"`
	GeneratedTokens float64 `json:"generated_tokens"`
	// RecordsPromptTokens is the successful requests' prompt tokens as
	// the counter read counts them (promptCounterCountsCached):
	// input_tokens for vLLM's, SGLang's and tokentrace serve's, which
	// count every prompt token, input_tokens − cached_tokens for
	// llama.cpp's, which counts those its slots computed;
	// RecordsOutputTokens their generated tokens (output_tokens +
	// reasoning_tokens: the answer's and a reasoning model's reasoning).
	RecordsPromptTokens int64 `json:"records_prompt_tokens"`
	RecordsOutputTokens int64 `json:"records_output_tokens"`
	// PromptMSPerToken and GenerationMSPerToken are the engine's summed
	// time on prompts (generation) over the tokens it computed
	// (generated); 0 when it does not count its time.
	PromptMSPerToken     float64 `json:"prompt_ms_per_token,omitempty"`
	GenerationMSPerToken float64 `json:"generation_ms_per_token,omitempty"`
}

// serverTokens reads the token counters over the run beside the records'
// sums; nil when the server exposes none.
func (a *analysis) serverTokens(s *Summary) *ServerTokens {
	ev := a.ev
	if !ev.has(figTokens) {
		return nil
	}
	t := &ServerTokens{Engine: ev.engine, PromptTokens: ev.promptTokens, GeneratedTokens: ev.genTokens,
		RecordsPromptTokens: s.InputTokens - s.CachedTokens, RecordsOutputTokens: s.OutputTokens}
	for _, i := range a.ok { // a reasoning model's counter counts its reasoning tokens too
		t.RecordsOutputTokens += int64(a.rows[i].reasoning)
	}
	t.Counters = counterNames(ev.tokenCounters, 2, "prompt tokens", "generated tokens")
	if t.countsCached() {
		t.RecordsPromptTokens = s.InputTokens
	}
	if ev.has(figEngineTime) {
		t.Counters = append(t.Counters, counterNames(ev.tokenCounters[min(2, len(ev.tokenCounters)):], 2, "prompt seconds", "generation seconds")...)
		if ev.promptTokens > 0 {
			t.PromptMSPerToken = 1e3 * ev.promptSeconds / ev.promptTokens
		}
		if ev.genTokens > 0 {
			t.GenerationMSPerToken = 1e3 * ev.genSeconds / ev.genTokens
		}
	}
	return t
}

// The figures of scrape's name sets the report reads by name (scrape's
// FigTokens and FigEngineTime; report does not import scrape, which
// speaks HTTP).
const (
	figTokens     = "tokens"
	figEngineTime = "engine_time"
)

// counterNames is the first n of names, with what stands in for each
// missing one (a run.json written before the names were kept).
func counterNames(names []string, n int, missing ...string) []string {
	out := make([]string, n)
	for i := range out {
		if i < len(names) {
			out[i] = names[i]
		} else {
			out[i] = "the server's " + missing[i] + " counter"
		}
	}
	return out
}

// promptCounterCountsCached names the prompt-token counters that count
// every prompt token of a request, those served from the prefix cache
// included: vLLM's (IterationStats adds the prompt's length at its first
// token; tokentrace serve exposes the same counter) and SGLang's (of which
// sglang:cached_tokens_total is a part). llama.cpp's counts only the
// prompt tokens its slots computed.
var promptCounterCountsCached = map[string]bool{"vllm:prompt_tokens_total": true, "sglang:prompt_tokens_total": true}

// countsCached says whether the prompt counter read counts cached tokens.
func (t *ServerTokens) countsCached() bool {
	return len(t.Counters) > 0 && promptCounterCountsCached[t.Counters[0]]
}

// tokenAgreement is how far the server's counts and the records' may
// differ before the report says so: 2 %, or 8 tokens on a small run.
const tokenAgreement = 0.02

// Note words the comparison for the report's notes.
func (t *ServerTokens) Note() string {
	prompt, records := "prompt tokens computed", "input − cached"
	if t.countsCached() {
		prompt, records = "prompt tokens (cached ones included)", "input"
	}
	n := fmt.Sprintf("the server's counters (%s) grew by %s %s and %s generated over the run; "+
		"the run's successful requests account for %s (%s) and %s",
		strings.Join(t.Counters[:2], ", "), num0(t.PromptTokens), prompt, num0(t.GeneratedTokens),
		strconv.FormatInt(t.RecordsPromptTokens, 10), records, strconv.FormatInt(t.RecordsOutputTokens, 10))
	if t.PromptMSPerToken > 0 || t.GenerationMSPerToken > 0 {
		n += fmt.Sprintf("; its own time (%s): %.3f ms per prompt token, %.3f ms per generated token, summed over "+
			"requests decoded together", strings.Join(t.Counters[2:], ", "), t.PromptMSPerToken, t.GenerationMSPerToken)
	}
	off := func(server float64, records int64) bool {
		d := math.Abs(server - float64(records))
		return d > 8 && d > tokenAgreement*math.Max(server, float64(records))
	}
	if off(t.PromptTokens, t.RecordsPromptTokens) || off(t.GeneratedTokens, t.RecordsOutputTokens) {
		n += "; they differ: warm-up or failed requests, other clients of the same server, or usage counted " +
			"otherwise than the server's counters — its figures then describe more (or other) work than this run's"
	} else {
		n += "; they agree"
	}
	return n
}
