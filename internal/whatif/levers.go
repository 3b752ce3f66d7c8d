package whatif

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tokentrace/tokentrace/internal/capacity"
	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/route"
)

// A lever is one engine or deployment setting a finding's remedy names. Its
// variants are the deployments to simulate, each with that one setting
// changed from the run's.
type lever struct {
	name string
	// rules are the findings whose remedies name it; metrics the SLOs a
	// generic breach (slo-breach) on which it may help.
	rules   []string
	metrics []latency.Metric
	// variants returns the changed deployments (none when the run already
	// has the setting, or the lever does not apply).
	variants func(c *state) []variant
}

// variant is one deployment to simulate, with what it changes and assumes.
type variant struct {
	lever, title, setting string
	d                     capacity.Deployment
	assumes               []string
	// retime, when set, says the profile is carried to a TP or precision
	// it was not fitted at.
	retime *retime
	// search, for replicas-needed: try more replicas until the SLOs hold.
	search bool
	// forRules are the findings it answers.
	forRules []string
}

// retime is the engine a profile is carried to.
type retime struct {
	tp      int
	dtype   string
	kvDType string
}

// state is what the levers read: the run's deployment, resolved, and
// the run's findings and options.
type state struct {
	base      capacity.Deployment
	ec        engine.Config // base's engine with defaults
	pc        perfmodel.Config
	findings  map[string]bool // rules that fired (those a lever needs)
	o         Options
	p90Output int
	maxOutput int
	sloTTFT   float64 // TTFT SLO threshold in seconds (0: none)
	// budget is the token budget prefill-interference suggests (0: none).
	budget int
	rate   float64 // the run's mean arrival rate
}

var (
	ttftish = []latency.Metric{latency.TTFT, latency.TTFTIntended, latency.E2E, latency.E2EIntended}
	decode  = []latency.Metric{latency.TPOT, latency.ITL, latency.ICL, latency.E2E, latency.E2EIntended}
	all     = append(slices.Clone(ttftish), latency.TPOT, latency.ITL, latency.ICL)
)

// levers is the catalog, in the order docs/report.md lists it.
var levers = []lever{
	{"prefix-caching", []string{report.RulePrefillBound, report.RulePrefixCacheUnused, report.RuleServerQueueing}, ttftish, func(c *state) []variant {
		if c.ec.EnablePrefixCaching {
			return nil
		}
		d := c.base
		d.Engine.EnablePrefixCaching = true
		return []variant{{title: "prefix caching on", setting: "enable_prefix_caching: false → true", d: d,
			assumes: []string{"the cache keeps what the KV cache has room for, evicting the least recently used blocks, as vLLM's"}}}
	}},
	{"chunked-prefill", []string{report.RulePrefillInterference, report.RuleStalls, report.RulePrefillBound}, all, func(c *state) []variant {
		if !c.ec.DisableChunkedPrefill {
			return nil
		}
		d := c.base
		d.Engine.EnableChunkedPrefill = true
		return []variant{{title: "chunked prefill on", setting: "enable_chunked_prefill: false → true", d: d}}
	}},
	{"token-budget", []string{report.RulePrefillInterference, report.RuleStalls, report.RulePrefillBound}, all, func(c *state) []variant {
		var out []variant
		cur := c.ec.MaxNumBatchedTokens
		if c.findings[report.RulePrefillInterference] || c.findings[report.RuleStalls] || c.o.all() {
			v, why := max(cur/2, 256), "half the run's"
			if c.budget > 0 {
				v, why = c.budget, "the budget the prefill-interference finding computes"
			}
			if v < cur && !c.ec.DisableChunkedPrefill {
				d := c.base
				d.Engine.MaxNumBatchedTokens = v
				out = append(out, variant{title: fmt.Sprintf("token budget %d", v),
					setting: fmt.Sprintf("max_num_batched_tokens: %d → %d", cur, v), d: d,
					assumes: []string{"a step's prefill chunk is cut to the budget (" + why + "), so decodes wait less and long prompts take more steps"}})
			}
		}
		if c.findings[report.RulePrefillBound] || c.o.all() {
			d := c.base
			d.Engine.MaxNumBatchedTokens = cur * 2
			out = append(out, variant{title: fmt.Sprintf("token budget %d", cur*2),
				setting: fmt.Sprintf("max_num_batched_tokens: %d → %d", cur, cur*2), d: d})
		}
		return out
	}},
	{"max-num-seqs", []string{report.RuleKVCache, report.RuleDecodeBandwidth, report.RuleServerQueueing}, all, func(c *state) []variant {
		var out []variant
		cur := c.ec.MaxNumSeqs
		if (c.findings[report.RuleKVCache] || c.findings[report.RuleDecodeBandwidth] || c.o.all()) && cur > 1 {
			d := c.base
			d.Engine.MaxNumSeqs = max(cur/2, 1)
			out = append(out, variant{title: fmt.Sprintf("max_num_seqs %d", d.Engine.MaxNumSeqs),
				setting: fmt.Sprintf("max_num_seqs: %d → %d", cur, d.Engine.MaxNumSeqs), d: d})
		}
		if c.findings[report.RuleServerQueueing] || c.o.all() {
			d := c.base
			d.Engine.MaxNumSeqs = cur * 2
			out = append(out, variant{title: fmt.Sprintf("max_num_seqs %d", cur*2),
				setting: fmt.Sprintf("max_num_seqs: %d → %d", cur, cur*2), d: d})
		}
		return out
	}},
	{"max-tokens-cap", []string{report.RuleOutputLength, report.RuleKVCache}, []latency.Metric{latency.E2E, latency.E2EIntended}, func(c *state) []variant {
		var out []variant
		add := func(n int, why string) {
			if n <= 0 || n >= c.maxOutput || (c.base.MaxMaxTokens > 0 && n >= c.base.MaxMaxTokens) {
				return
			}
			for _, v := range out {
				if v.d.MaxMaxTokens == n {
					return
				}
			}
			d := c.base
			d.MaxMaxTokens = n
			out = append(out, variant{title: fmt.Sprintf("max_tokens capped at %d", n), setting: fmt.Sprintf("max_max_tokens: %d (clamp)", n), d: d,
				assumes: []string{fmt.Sprintf("answers longer than %d tokens are cut there (%s); the user gets less text", n, why)}})
		}
		add(c.p90Output, "the run's P90 output length")
		add(c.o.MaxTokensCap, "--max-tokens-cap")
		return out
	}},
	{"weights", []string{report.RuleDecodeBandwidth, report.RuleKVCache, report.RulePrefillBound, report.RuleServerQueueing}, all, func(c *state) []variant {
		var out []variant
		for _, dt := range []perfmodel.DType{perfmodel.FP8, perfmodel.INT8, perfmodel.INT4} {
			if dt.Bytes() >= c.pc.WeightDType.Bytes() || dt == perfmodel.FP8 && (c.pc.GPU.Family == "cpu" || llamaCpp(c.base)) {
				continue // a CPU, and llama.cpp's GGUF files, have no fp8
			}
			d := c.base
			d.Engine.DType = string(dt)
			kv := string(c.pc.KVDType) // keep the KV cache's precision
			d.Engine.KVCacheDType = kv
			out = append(out, variant{title: string(dt) + " weights", setting: fmt.Sprintf("dtype: %s → %s", c.pc.WeightDType, dt), d: d,
				retime:  &retime{tp: c.pc.TP, dtype: string(dt), kvDType: kv},
				assumes: []string{"the quantized model answers as well as the original (quality is not simulated)"}})
		}
		return out
	}},
	{"kv-cache-dtype", []string{report.RuleDecodeBandwidth, report.RuleKVCache}, decode, func(c *state) []variant {
		var out []variant
		for _, dt := range []perfmodel.DType{perfmodel.FP8, perfmodel.INT8} {
			if dt.Bytes() >= c.pc.KVDType.Bytes() || dt == perfmodel.FP8 && (c.pc.GPU.Family == "cpu" || llamaCpp(c.base)) {
				continue // no fp8 on a CPU, nor in llama.cpp's cache types
			}
			d := c.base
			d.Engine.KVCacheDType = string(dt)
			out = append(out, variant{title: string(dt) + " KV cache", setting: fmt.Sprintf("kv_cache_dtype: %s → %s", c.pc.KVDType, dt), d: d,
				retime:  &retime{tp: c.pc.TP, dtype: string(c.pc.WeightDType), kvDType: string(dt)},
				assumes: []string{"twice the KV cache in the same memory, half the bytes read per decoded token; quality is not simulated"}})
		}
		return out
	}},
	{"speculative-decoding", []string{report.RuleDecodeBandwidth}, decode, func(c *state) []variant {
		if c.ec.Speculative.K > 0 {
			return nil
		}
		d := c.base
		d.Engine.SpeculativeK, d.Engine.SpeculativeAlpha = c.o.SpeculativeK, c.o.SpeculativeAlpha
		return []variant{{title: fmt.Sprintf("speculative decoding k=%d", c.o.SpeculativeK),
			setting: fmt.Sprintf("speculative_k: 0 → %d, speculative_alpha %g", c.o.SpeculativeK, c.o.SpeculativeAlpha), d: d,
			assumes: []string{fmt.Sprintf("each drafted token is accepted with probability %g (--speculative-alpha), drafts are free (n-gram proposals, no draft model)", c.o.SpeculativeAlpha)}}}
	}},
	{"tensor-parallel", []string{report.RulePrefillBound, report.RuleDecodeBandwidth, report.RuleKVCache, report.RuleServerQueueing}, all, func(c *state) []variant {
		if !splits(c.pc.GPU) {
			return nil // a CPU thread, or a device with no link to split a model over
		}
		d := c.base
		tp := c.pc.TP * 2
		d.Engine.TensorParallelSize = tp
		return []variant{{title: fmt.Sprintf("tensor parallelism %d", tp), setting: fmt.Sprintf("tensor_parallel_size: %d → %d", c.pc.TP, tp), d: d,
			retime:  &retime{tp: tp, dtype: string(c.pc.WeightDType), kvDType: string(c.pc.KVDType)},
			assumes: []string{fmt.Sprintf("%d × the GPUs per replica, joined by the GPU's interconnect (all-reduce per layer priced by the model)", 2)}}}
	}},
	{"replicas", []string{report.RuleServerQueueing}, ttftish, func(c *state) []variant {
		d := c.base
		d.Replicas++
		out := []variant{{title: "one more replica", setting: fmt.Sprintf("replicas: %d → %d", c.base.Replicas, d.Replicas), d: d,
			assumes: []string{fmt.Sprintf("requests spread by %s, as the gateway's balancer", balancer(d))}}}
		if len(c.o.SLOs) > 0 {
			out = append(out, variant{lever: "replicas-needed", title: "replicas to meet the SLOs", d: d, search: true,
				assumes: []string{"the fewest replicas at which every SLO holds at the run's rate, searched one at a time"}})
		}
		return out
	}},
	{"disaggregate", []string{report.RulePrefillInterference, report.RuleStalls, report.RulePDTransfer}, ttftish, func(c *state) []variant {
		return disaggregate(c)
	}},
	{"pd-ratio", []string{report.RulePDPrefillQueue, report.RulePDDecodeQueue}, ttftish, func(c *state) []variant {
		return pdRatios(c)
	}},
	{"kv-link", []string{report.RulePDTransfer}, ttftish, func(c *state) []variant {
		return kvLinks(c)
	}},
	{"prefill-tp", []string{report.RulePDPrefillQueue}, ttftish, func(c *state) []variant {
		return prefillTP(c)
	}},
	{"priority-scheduling", []string{report.RuleServerQueueing}, ttftish, func(c *state) []variant {
		if c.ec.Policy == engine.PolicyPriority {
			return nil
		}
		d := c.base
		d.Engine.SchedulingPolicy, d.ShortestFirst = engine.PolicyPriority, true
		return []variant{{title: "priority scheduling, shortest first", setting: "scheduling_policy: fcfs → priority (priority = prompt + max_tokens)", d: d,
			assumes: []string{"the run's requests carry no priority of their own: the twin gives each the priority of its length, so short requests overtake long ones in the queue (long ones wait longer)"}}}
	}},
	{"admission-control", []string{report.RuleServerQueueing}, []latency.Metric{latency.TTFT, latency.TTFTIntended}, func(c *state) []variant {
		if c.ec.MaxWaiting > 0 {
			return nil
		}
		// Little's law: a queue of n drains in n ÷ rate; bound it so
		// that a request at its end still starts within the TTFT SLO.
		n, why := c.ec.MaxNumSeqs, "max_num_seqs, for want of a TTFT SLO"
		if c.sloTTFT > 0 {
			n, why = max(1, int(c.rate*c.sloTTFT*float64(c.base.Replicas))), "the run's rate × the TTFT SLO (Little's law), per replica"
			n = max(1, n/c.base.Replicas)
		}
		d := c.base
		d.Engine.MaxWaiting = n
		return []variant{{title: fmt.Sprintf("admission control: at most %d waiting", n),
			setting: fmt.Sprintf("max_waiting: unbounded → %d (shed with 429)", n), d: d,
			assumes: []string{"requests beyond the bound are refused at once (429) and count as failed: a refused request is infinitely late to the SLOs; bound = " + why}}}
	}},
}

// splits says whether a model can be split over several of the device by
// tensor parallelism: it has a link between devices and is not a CPU.
func splits(g perfmodel.GPU) bool {
	return g.Family != "cpu" && g.Interconnect != "" && g.Interconnect != "none"
}

func balancer(d capacity.Deployment) string {
	if d.Balancer == "" {
		return route.NameLeastOutstanding
	}
	return d.Balancer
}

// LeverNames lists the levers --what-if accepts.
func LeverNames() []string {
	out := make([]string, len(levers))
	for i, l := range levers {
		out[i] = l.name
	}
	return out
}

// notInLlamaCpp are the levers llama-server has no setting for: it serves
// prefill and decode in one process, always computes prompts a batch at a
// time, and gives slots first come, first served.
var notInLlamaCpp = []string{"disaggregate", "pd-ratio", "kv-link", "prefill-tp", "chunked-prefill", "priority-scheduling"}

// ggufQuant is the GGUF quantization llama.cpp serves for a precision.
var ggufQuant = map[string]string{"int8": "Q8_0", "int4": "Q4_K_M"}

// ggufKVType is llama.cpp's KV cache type for a precision.
var ggufKVType = map[string]string{"int8": "q8_0"}

// llamaCpp says whether the twin simulates llama.cpp's server (a profile's
// or the embedded run's --engine llamacpp).
func llamaCpp(d capacity.Deployment) bool {
	f, ok := engine.FamilyOf(d.Engine.Engine)
	return ok && f.Name == "llamacpp"
}

// inLlamaCppTerms words a variant in llama-server's settings when the twin
// is llama.cpp's: the per-step token budget is its batch (-b), the running
// requests its slots (-np). Other variants are left as they are.
func inLlamaCppTerms(c *state, v variant) variant {
	if !llamaCpp(c.base) {
		return v
	}
	switch v.lever {
	case "token-budget":
		n := v.d.Engine.MaxNumBatchedTokens
		v.title = fmt.Sprintf("batch %d (-b)", n)
		v.setting = fmt.Sprintf("-b/--batch-size: %d → %d", c.ec.MaxNumBatchedTokens, n)
		for i, a := range v.assumes {
			v.assumes[i] = strings.ReplaceAll(a, "prefill chunk is cut to the budget", "prompt is computed a batch at a time")
		}
	case "max-num-seqs":
		n := v.d.Engine.MaxNumSeqs
		v.title = fmt.Sprintf("%d slots (-np)", n)
		v.setting = fmt.Sprintf("-np/--parallel: %d → %d", c.ec.MaxNumSeqs, n)
	case "weights":
		if q, ok := ggufQuant[v.d.Engine.DType]; ok {
			v.title = q + " weights"
			v.setting = fmt.Sprintf("model file: %s → %s, made by llama-quantize", c.pc.WeightDType, q)
		}
	case "kv-cache-dtype":
		if q, ok := ggufKVType[v.d.Engine.KVCacheDType]; ok {
			v.title = q + " KV cache"
			v.setting = fmt.Sprintf("--cache-type-k and --cache-type-v: f16 → %s", q)
		}
	case "speculative-decoding":
		v.setting = fmt.Sprintf("--draft-max %d (llama-server's speculative decoding)", v.d.Engine.SpeculativeK)
	case "admission-control":
		v.assumes = append(v.assumes, "llama-server has no such bound: a gateway in front of it sheds the excess (tokentrace gateway's admission queue)")
	}
	return v
}
