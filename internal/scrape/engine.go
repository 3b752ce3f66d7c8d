package scrape

import (
	"strconv"
	"strings"
)

// Engine is the metric names one serving engine exposes for the figures
// tokentrace reads. Where an engine has several names for a figure
// (versions renamed them), the first present is read.
type Engine struct {
	// Name is the engine: vllm, sglang, tgi, llamacpp or tokentrace.
	Name string
	// Prefix marks the engine's metrics (Detect looks for it).
	Prefix string
	// Running and Waiting are gauges of requests in the batch and queued.
	Running, Waiting []string
	// KVUsage is a gauge of the share of the KV cache in use, 0..1.
	KVUsage []string
	// Preemptions is a counter of requests preempted (SGLang: retracted).
	Preemptions []string
	// PrefixQueries and PrefixHits are counters of prompt tokens looked up
	// in and served from the prefix cache.
	PrefixQueries, PrefixHits []string
	// PrefixHitRate is a gauge of the prefix cache's hit rate, for engines
	// that give no counters.
	PrefixHitRate []string
	// PromptTokens and GenerationTokens are counters of the prompt tokens
	// the engine computed and the tokens it generated.
	PromptTokens, GenerationTokens []string
	// PromptSeconds and GenerationSeconds are counters of the engine's
	// time on prompts and on generation, summed over requests
	// (llama.cpp's per-slot timings).
	PromptSeconds, GenerationSeconds []string
	// Info are info metrics whose labels describe the configuration.
	Info []string
	// Settings are gauges that hold one setting each, by setting name.
	Settings map[string]string
}

// The engines tokentrace knows. tokentrace serve uses vLLM's names and
// adds tokentrace:scheduler_config_info.
var (
	VLLM = Engine{Name: "vllm", Prefix: "vllm:",
		Running: []string{"vllm:num_requests_running"}, Waiting: []string{"vllm:num_requests_waiting"},
		KVUsage:       []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
		Preemptions:   []string{"vllm:num_preemptions_total"},
		PrefixQueries: []string{"vllm:prefix_cache_queries_total"}, PrefixHits: []string{"vllm:prefix_cache_hits_total"},
		PrefixHitRate: []string{"vllm:gpu_prefix_cache_hit_rate"},
		PromptTokens:  []string{"vllm:prompt_tokens_total"}, GenerationTokens: []string{"vllm:generation_tokens_total"},
		Info: []string{"vllm:cache_config_info", "tokentrace:scheduler_config_info"},
	}
	SGLang = Engine{Name: "sglang", Prefix: "sglang:",
		Running: []string{"sglang:num_running_reqs"}, Waiting: []string{"sglang:num_queue_reqs"},
		KVUsage:       []string{"sglang:token_usage"},
		Preemptions:   []string{"sglang:num_retracted_requests_total"},
		PrefixQueries: []string{"sglang:prompt_tokens_total"}, PrefixHits: []string{"sglang:cached_tokens_total"},
		PrefixHitRate: []string{"sglang:cache_hit_rate"},
		PromptTokens:  []string{"sglang:prompt_tokens_total"}, GenerationTokens: []string{"sglang:generation_tokens_total"},
		Settings: map[string]string{"max_prefill_tokens": "sglang:max_prefill_tokens", "max_running_requests": "sglang:max_running_requests"},
	}
	TGI = Engine{Name: "tgi", Prefix: "tgi_",
		Running: []string{"tgi_batch_current_size"}, Waiting: []string{"tgi_queue_size"},
		Settings: map[string]string{"max_batch_total_tokens": "tgi_batch_current_max_tokens"},
	}
	LlamaCpp = Engine{Name: "llamacpp", Prefix: "llamacpp:",
		Running: []string{"llamacpp:requests_processing"}, Waiting: []string{"llamacpp:requests_deferred"},
		KVUsage: []string{"llamacpp:kv_cache_usage_ratio"},
		// tools/server/server-context.cpp (81ff7abe5), the /metrics
		// handler: prompt tokens computed (not those reused from a
		// slot's cache), tokens generated, and the slots' summed
		// prompt and generation times.
		PromptTokens: []string{"llamacpp:prompt_tokens_total"}, GenerationTokens: []string{"llamacpp:tokens_predicted_total"},
		PromptSeconds: []string{"llamacpp:prompt_seconds_total"}, GenerationSeconds: []string{"llamacpp:tokens_predicted_seconds_total"},
	}
	// Engines lists them in the order Detect tries them.
	Engines = []Engine{VLLM, SGLang, TGI, LlamaCpp}
)

// ForKind is the engine of a gateway replica kind (vllm, sglang, tgi,
// llamacpp); any other kind (tokentrace, openai, ollama) reads vLLM's
// names.
func ForKind(kind string) Engine {
	for _, e := range Engines {
		if e.Name == kind {
			return e
		}
	}
	return VLLM
}

// Detect is the engine whose metrics the exposition holds; ok is false
// when it holds none tokentrace knows. A vLLM exposition with
// tokentrace:scheduler_config_info is tokentrace serve's.
func Detect(f Families) (e Engine, ok bool) {
	for _, e := range Engines {
		for name := range f {
			if strings.HasPrefix(name, e.Prefix) {
				if e.Name == "vllm" && f["tokentrace:scheduler_config_info"] != nil {
					e.Name = "tokentrace"
				}
				return e, true
			}
		}
	}
	return Engine{}, false
}

// GatewayConfigInfo is a tokentrace gateway's configuration info metric:
// the levers the gateway owns, one series per route.
const GatewayConfigInfo = "tokentrace_gateway_config_info"

// GatewayConfig is a tokentrace gateway's configuration as its /metrics
// expose it (GatewayConfigInfo's first series, the route and pool names
// left out), or nil when f is not a gateway's.
func GatewayConfig(f Families) map[string]string {
	out := f.Labels(GatewayConfigInfo)
	delete(out, "model")
	delete(out, "pool")
	if len(out) == 0 {
		return nil
	}
	return out
}

// Figure names the figures a Sample holds, for Sample.Has.
const (
	FigRunning       = "running"
	FigWaiting       = "waiting"
	FigKVUsage       = "kv_cache_usage"
	FigPreemptions   = "preemptions"
	FigPrefixCache   = "prefix_cache"    // queries and hits
	FigPrefixHitRate = "prefix_hit_rate" // a rate gauge only
	FigTokens        = "tokens"          // prompt and generated token counters
	FigEngineTime    = "engine_time"     // prompt and generation time counters
)

// Sample is one scrape read with an engine's names. Counters are
// cumulative since the server started.
type Sample struct {
	Running, Waiting          float64
	KVUsage                   float64 // 0..1
	Preemptions               float64
	PrefixQueries, PrefixHits float64 // prompt tokens
	PrefixHitRate             float64 // 0..1, when the engine gives a rate
	// PromptTokens and GenerationTokens count tokens computed;
	// PromptSeconds and GenerationSeconds the engine's time on them.
	PromptTokens, GenerationTokens   float64
	PromptSeconds, GenerationSeconds float64
	// Has lists the figures the exposition held (Fig* names).
	Has []string
}

// Read reads the figures of one exposition.
func (e Engine) Read(f Families) Sample {
	var s Sample
	for _, x := range []struct {
		fig   string
		names []string
		dst   *float64
	}{
		{FigRunning, e.Running, &s.Running}, {FigWaiting, e.Waiting, &s.Waiting},
		{FigKVUsage, e.KVUsage, &s.KVUsage}, {FigPreemptions, e.Preemptions, &s.Preemptions},
		{FigPrefixHitRate, e.PrefixHitRate, &s.PrefixHitRate},
	} {
		if v, ok := f.First(x.names); ok {
			*x.dst = v
			s.Has = append(s.Has, x.fig)
		}
	}
	for _, x := range []struct {
		fig        string
		names      [2][]string
		dst0, dst1 *float64
	}{
		{FigPrefixCache, [2][]string{e.PrefixQueries, e.PrefixHits}, &s.PrefixQueries, &s.PrefixHits},
		{FigTokens, [2][]string{e.PromptTokens, e.GenerationTokens}, &s.PromptTokens, &s.GenerationTokens},
		{FigEngineTime, [2][]string{e.PromptSeconds, e.GenerationSeconds}, &s.PromptSeconds, &s.GenerationSeconds},
	} {
		// A pair of counters: both, or the figure is unknown.
		a, okA := f.First(x.names[0])
		b, okB := f.First(x.names[1])
		if okA && okB {
			*x.dst0, *x.dst1 = a, b
			s.Has = append(s.Has, x.fig)
		}
	}
	return s
}

// TokenCounters names the token counters (prompt, generated) and, where
// the engine has them, the time counters (prompt, generation) the
// exposition holds, as Read reads them; nil when it lacks the token pair.
func (e Engine) TokenCounters(f Families) []string {
	name := func(names []string) string {
		for _, n := range names {
			if _, ok := f.Sum(n); ok {
				return n
			}
		}
		return ""
	}
	var out []string
	for _, pair := range [][2][]string{{e.PromptTokens, e.GenerationTokens}, {e.PromptSeconds, e.GenerationSeconds}} {
		a, b := name(pair[0]), name(pair[1])
		if a == "" || b == "" {
			break
		}
		out = append(out, a, b)
	}
	return out
}

// Config reads the engine's settings where it exposes them: the labels of
// its info metrics (engine and model labels left out) and its
// one-setting gauges, as text. Nil when there are none.
func (e Engine) Config(f Families) map[string]string {
	var out map[string]string
	set := func(k, v string) {
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	for _, name := range e.Info {
		for k, v := range f.Labels(name) {
			if k != "engine" && k != "model_name" {
				set(k, v)
			}
		}
	}
	for k, name := range e.Settings {
		if v, ok := f.Sum(name); ok {
			set(k, strconv.FormatFloat(v, 'g', -1, 64))
		}
	}
	return out
}
