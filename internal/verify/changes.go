package verify

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/tokentrace/tokentrace/internal/capacity"
	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/route"
)

// Change is one thing that differs between the runs.
type Change struct {
	// Lever is the what-if lever it is (docs/report.md, "What-if
	// remedies"), "load" for bench's own load, or "" when it has none.
	Lever string `json:"lever,omitempty"`
	// Setting is its name where it was found (vLLM's and serve's setting
	// names, bench's flags); Before and After its two values.
	Setting string `json:"setting"`
	Before  string `json:"before"`
	After   string `json:"after"`
	// Source says where it was found: "server" (run.json's server
	// evidence), "embedded engine" (bench's --sim-* flags), "bench" (the
	// load's flags) or "applied" (--applied).
	Source string `json:"source"`
	// Modeled says the twin re-simulates it; Why says why not.
	Modeled bool   `json:"modeled"`
	Why     string `json:"why,omitempty"`
	// BeforeApplied says Before came from --applied FROM:TO and is set on
	// the first run's twin too.
	BeforeApplied bool `json:"before_applied,omitempty"`
}

// String is the change in one line: "max_num_seqs: 2 → 4 (server)".
func (c Change) String() string {
	s := fmt.Sprintf("%s: %s → %s (%s)", c.Setting, orNone(c.Before), orNone(c.After), c.Source)
	if !c.Modeled {
		s += " — not modelled: " + c.Why
	}
	return s
}

func orNone(v string) string {
	if v == "" {
		return "unset"
	}
	return v
}

// setting is one engine or deployment setting the twin can change: its
// name as the server exposes it, the embedded engine's flag, the lever,
// and how to set it on a deployment.
type setting struct {
	key, flag, lever string
	apply            func(d *capacity.Deployment, v string) error
}

func intSetting(p func(d *capacity.Deployment) *int) func(*capacity.Deployment, string) error {
	return func(d *capacity.Deployment, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("%q is not a non-negative integer", v)
		}
		*p(d) = n
		return nil
	}
}

func boolSetting(p func(d *capacity.Deployment) *bool) func(*capacity.Deployment, string) error {
	return func(d *capacity.Deployment, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q is not true or false", v)
		}
		*p(d) = b
		return nil
	}
}

func stringSetting(p func(d *capacity.Deployment) *string) func(*capacity.Deployment, string) error {
	return func(d *capacity.Deployment, v string) error { *p(d) = v; return nil }
}

// settings is what the twin can change, by the names servers expose.
var settings = []setting{
	{"enable_prefix_caching", "sim-enable-prefix-caching", "prefix-caching", boolSetting(func(d *capacity.Deployment) *bool { return &d.Engine.EnablePrefixCaching })},
	{"enable_chunked_prefill", "sim-enable-chunked-prefill", "chunked-prefill", boolSetting(func(d *capacity.Deployment) *bool { return &d.Engine.EnableChunkedPrefill })},
	{"max_num_batched_tokens", "sim-max-num-batched-tokens", "token-budget", intSetting(func(d *capacity.Deployment) *int { return &d.Engine.MaxNumBatchedTokens })},
	{"max_num_seqs", "sim-max-num-seqs", "max-num-seqs", intSetting(func(d *capacity.Deployment) *int { return &d.Engine.MaxNumSeqs })},
	{"scheduling_policy", "sim-scheduling-policy", "priority-scheduling", stringSetting(func(d *capacity.Deployment) *string { return &d.Engine.SchedulingPolicy })},
	{"max_waiting", "sim-max-waiting", "admission-control", intSetting(func(d *capacity.Deployment) *int { return &d.Engine.MaxWaiting })},
	{"cache_dtype", "sim-kv-cache-dtype", "kv-cache-dtype", stringSetting(func(d *capacity.Deployment) *string { return &d.Engine.KVCacheDType })},
	{"dtype", "sim-dtype", "weights", stringSetting(func(d *capacity.Deployment) *string { return &d.Engine.DType })},
	{"tensor_parallel_size", "sim-tensor-parallel-size", "tensor-parallel", intSetting(func(d *capacity.Deployment) *int { return &d.Engine.TensorParallelSize })},
	{"speculative_k", "sim-speculative-k", "speculative-decoding", intSetting(func(d *capacity.Deployment) *int { return &d.Engine.SpeculativeK })},
	{"block_size", "sim-block-size", "block-size", intSetting(func(d *capacity.Deployment) *int { return &d.Engine.BlockSize })},
	{"gpu_memory_utilization", "sim-gpu-memory-utilization", "gpu-memory-utilization", func(d *capacity.Deployment, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0 && f <= 1) {
			return fmt.Errorf("%q is not a fraction in (0, 1]", v)
		}
		d.Engine.GPUMemoryUtilization = f
		return nil
	}},
	{"replicas", "replicas", "replicas", intSetting(func(d *capacity.Deployment) *int { return &d.Replicas })},
	{"balancer", "balancer", "routing-policy", func(d *capacity.Deployment, v string) error {
		if !slices.Contains(route.Names, v) {
			return fmt.Errorf("%q is not one of %s", v, strings.Join(route.Names, ", "))
		}
		d.Balancer = v
		return nil
	}},
	// The gateway's admission limit: checked here, folded into the
	// engines by foldGateway once every change is applied.
	{keyGatewayConcurrency, "gateway-concurrency", "gateway-admission", intSetting(func(*capacity.Deployment) *int { return new(int) })},
	{keyGatewayMaxQueue, "gateway-max-queue", "gateway-admission", intSetting(func(*capacity.Deployment) *int { return new(int) })},
	{"max_max_tokens", "max-max-tokens", "max-tokens-cap", intSetting(func(d *capacity.Deployment) *int { return &d.MaxMaxTokens })},
	// Disaggregated serving: the pools (folded from the gateway's
	// prefill_replicas and replicas by foldPD) and the KV link.
	{keyPDSplit, "pd-split", "disaggregate", applySplit},
	{keyPrefillReplicas, "prefill-replicas", "disaggregate", intSetting(func(d *capacity.Deployment) *int { return &d.PrefillReplicas })},
	{keyKVLink, "kv-link", "kv-link", applyLink},
}

// upstreamReplica is the label a gateway's /upstream/metrics adds to an
// engine's series (which replica answered): evidence of where the
// settings were read, not a setting.
const upstreamReplica = "replica"

// derived are settings a server exposes that follow from others (the KV
// blocks from memory, precision and block size): a change in them alone
// is named, not modelled.
var derived = map[string]string{
	"num_gpu_blocks": "the KV-cache blocks follow from the GPU memory, precisions and block size; a change in them alone (num_gpu_blocks_override) is not modelled",
}

// loadFlags are bench's flags that shape the load: a change in any is the
// lever "load", modelled by replaying the second run's workload.
var loadFlags = []string{"rate", "concurrency", "input-tokens", "output-tokens", "prefix-tokens", "prefix-groups",
	"arrival", "burstiness", "turns", "think-time", "trace", "time-scale", "prompts", "endpoint", "stream",
	"agent-sessions", "agent-steps", "agent-tools", "tool-latency", "tool-mode"}

// sampleFlags draw another sample of the same load: named, not a lever.
var sampleFlags = []string{"seed", "requests", "duration", "warmup"}

func hasSetting(k string) bool { _, ok := settingByKey(k); return ok }

func settingByKey(k string) (setting, bool) {
	i := slices.IndexFunc(settings, func(s setting) bool { return s.key == k || s.lever == k || s.flag == k })
	if i < 0 {
		return setting{}, false
	}
	return settings[i], true
}

// Run is one results folder's evidence: its run.json and config.json.
type Run struct {
	Dir    string
	Info   results.RunInfo
	Config map[string]string
}

// ReadRun reads a results folder's evidence.
func ReadRun(dir string) (Run, error) {
	info, _, err := results.ReadRunInfo(dir)
	if err != nil {
		return Run{}, err
	}
	cfg, err := results.ReadConfig(dir)
	if err != nil {
		return Run{}, err
	}
	return Run{Dir: dir, Info: info, Config: cfg}, nil
}

func (r Run) server() map[string]string {
	if r.Info.Server == nil {
		return nil
	}
	return r.Info.Server.Config
}

// value is setting k as the run's evidence shows it: the server's, else
// the embedded or simulated engine's flag ("" when neither says).
func (r Run) value(k string) string {
	if v, ok := r.server()[k]; ok {
		return v
	}
	if s, ok := settingByKey(k); ok {
		if r.Info.Simulated {
			return r.Config[strings.TrimPrefix(s.flag, "sim-")]
		}
		return r.Config[s.flag]
	}
	return ""
}

// Diff lists what changed from a to b: the server's exposed
// configuration, the embedded engine's flags where the server exposed
// nothing of the same setting, bench's load, and the rest of the embedded
// engine's flags (named, not modelled).
func Diff(a, b Run) []Change {
	var out []Change
	sa, sb := a.server(), b.server()
	seen := map[string]bool{}
	if ea, eb := engineOf(a), engineOf(b); ea != eb && ea != "" && eb != "" {
		out = append(out, Change{Setting: "engine", Before: ea, After: eb, Source: "server",
			Why: "a different engine is a different twin: calibrate one for it"})
	}
	for _, k := range sortedUnion(sa, sb) {
		va, vb := sa[k], sb[k]
		if va == vb || k == upstreamReplica {
			continue
		}
		out = append(out, classify(k, va, vb, "server"))
		if s, ok := settingByKey(k); ok {
			seen[s.key] = true
		}
	}
	for _, k := range sortedUnion(a.Config, b.Config) {
		va, okA := a.Config[k]
		vb, okB := b.Config[k]
		if va == vb || !okA || !okB || k == "output-dir" { // a flag one run did not record is unknown, not changed
			continue
		}
		switch {
		case slices.Contains(loadFlags, k):
			out = append(out, Change{Lever: "load", Setting: k, Before: va, After: vb, Source: loadSource(a), Modeled: true})
		case slices.Contains(sampleFlags, k):
			out = append(out, Change{Setting: k, Before: va, After: vb, Source: loadSource(a), Modeled: true,
				Why: "another sample of the same load: the twin replays the second run's requests"})
		case a.Info.Simulated && b.Info.Simulated && k != "replicas" && hasSetting("sim-"+k):
			if s, _ := settingByKey("sim-" + k); !seen[s.key] {
				out = append(out, classify(s.key, va, vb, "simulated engine"))
			}
		case strings.HasPrefix(k, "sim-"):
			s, ok := settingByKey(k)
			if ok && seen[s.key] {
				continue
			}
			c := classify(strings.TrimPrefix(k, "sim-"), va, vb, "embedded engine")
			if ok {
				c = classify(s.key, va, vb, "embedded engine")
			}
			out = append(out, c)
		case k == "replicas" || k == "max-max-tokens":
			src := "bench"
			if a.Info.Simulated {
				src = "simulated deployment"
			}
			out = append(out, classify(k, va, vb, src))
		}
	}
	return out
}

// loadSource names where a run's load flags come from.
func loadSource(r Run) string {
	if r.Info.Simulated {
		return "simulate"
	}
	return "bench"
}

// engineOf is the engine a run's server evidence names.
func engineOf(r Run) string {
	if r.Info.Server == nil {
		return ""
	}
	return r.Info.Server.Engine
}

// classify makes a change of setting k, modelled when the twin knows it.
func classify(k, va, vb, source string) Change {
	c := Change{Setting: k, Before: va, After: vb, Source: source}
	if s, ok := settingByKey(k); ok {
		c.Lever, c.Setting, c.Modeled = s.lever, s.key, true
		if vb == "" {
			c.Modeled, c.Why = false, "the second run does not expose it"
		}
		return c
	}
	if why, ok := derived[k]; ok {
		c.Why = why
		return c
	}
	c.Why = "the twin has no such setting"
	return c
}

func sortedUnion(a, b map[string]string) []string {
	keys := slices.Collect(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// ParseApplied reads --applied LEVER=VALUE (a lever's name, or the
// setting's: max-num-seqs=4, max_num_seqs=4), or LEVER=FROM:TO when the
// first run's value is not in its evidence either (max-num-seqs=2:4):
// FROM is then the first run's twin's. The P/D levers take the pools
// after the change: disaggregate=1P:1D (or =2, aggregated), pd-ratio=1:2,
// kv-link=PRESET.
func ParseApplied(s string) (Change, error) {
	k, v, ok := strings.Cut(strings.TrimSpace(s), "=")
	k, v = strings.TrimSpace(k), strings.TrimSpace(v)
	if c, pd, err := parsePDApplied(s, k, v); pd { // its value holds a colon of its own
		return c, err
	}
	from, to, both := strings.Cut(v, ":")
	if both {
		from, v = strings.TrimSpace(from), strings.TrimSpace(to)
	} else {
		from = ""
	}
	if !ok || k == "" || v == "" || both && from == "" {
		return Change{}, field.Invalid("applied", s, "want LEVER=VALUE or LEVER=FROM:TO, e.g. max-num-seqs=4 or max-num-seqs=2:4")
	}
	st, found := settingByKey(k)
	if !found {
		var names []string
		for _, s := range settings {
			names = append(names, s.lever)
		}
		return Change{}, field.Invalid("applied", s, "unknown lever %q (known: %s)", k, strings.Join(names, ", "))
	}
	var probe capacity.Deployment
	for _, x := range []string{from, v} {
		if x == "" {
			continue
		}
		if err := st.apply(&probe, x); err != nil {
			return Change{}, field.Invalid("applied", s, "%v", err)
		}
	}
	return Change{Lever: st.lever, Setting: st.key, Before: from, After: v, Source: "applied", Modeled: true, BeforeApplied: both}, nil
}

// applyBefore sets on the first run's twin the first values --applied
// gives (LEVER=FROM:TO).
func applyBefore(d *capacity.Deployment, cs []Change) error {
	for _, c := range cs {
		if !c.BeforeApplied {
			continue
		}
		s, _ := settingByKey(c.Setting)
		if err := s.apply(d, c.Before); err != nil {
			return field.Invalid(c.Setting, c.Before, "%v", err)
		}
	}
	return nil
}

// apply sets the modelled engine and deployment changes on d.
func apply(d *capacity.Deployment, cs []Change) error {
	for _, c := range cs {
		if !c.Modeled || c.Lever == "load" || c.Lever == "" {
			continue
		}
		s, _ := settingByKey(c.Setting)
		if err := s.apply(d, c.After); err != nil {
			return field.Invalid(c.Setting, c.After, "%v", err)
		}
	}
	return nil
}

// merge adds the applied changes to those found: one a run's evidence
// already shows is kept as found (with the value applied, when they
// differ, and a note saying so).
func merge(found, applied []Change) ([]Change, []string) {
	out := slices.Clone(found)
	var notes []string
	for _, a := range applied {
		i := slices.IndexFunc(out, func(c Change) bool { return c.Setting == a.Setting })
		if i < 0 {
			out = append(out, a)
			continue
		}
		if out[i].After != a.After {
			notes = append(notes, fmt.Sprintf("--applied %s=%s overrides the evidence's %s", a.Setting, a.After, out[i].String()))
			out[i].After, out[i].Source, out[i].Modeled = a.After, "applied", true
			if a.BeforeApplied {
				out[i].Before, out[i].BeforeApplied = a.Before, true
			}
		}
	}
	return out, notes
}
