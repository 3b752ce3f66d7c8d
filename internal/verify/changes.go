package verify

import (
	"cmp"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/capacity"
	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/route"
	"github.com/tokentrace/tokentrace/internal/simulate"
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
// name as the server exposes it, the embedded engine's flag (as --applied
// may name it), the lever, how to set it on a deployment, and its field
// in a run's typed configuration (engine.Options' or simulate.Options'
// JSON name; "" for none).
type setting struct {
	key, flag, lever string
	apply            func(d *capacity.Deployment, v string) error
	field            string
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
	{"enable_prefix_caching", "sim-enable-prefix-caching", "prefix-caching", boolSetting(func(d *capacity.Deployment) *bool { return &d.Engine.EnablePrefixCaching }), "enable_prefix_caching"},
	{"enable_chunked_prefill", "sim-enable-chunked-prefill", "chunked-prefill", boolSetting(func(d *capacity.Deployment) *bool { return &d.Engine.EnableChunkedPrefill }), "enable_chunked_prefill"},
	{"max_num_batched_tokens", "sim-max-num-batched-tokens", "token-budget", intSetting(func(d *capacity.Deployment) *int { return &d.Engine.MaxNumBatchedTokens }), "max_num_batched_tokens"},
	{"max_num_seqs", "sim-max-num-seqs", "max-num-seqs", intSetting(func(d *capacity.Deployment) *int { return &d.Engine.MaxNumSeqs }), "max_num_seqs"},
	{"scheduling_policy", "sim-scheduling-policy", "priority-scheduling", stringSetting(func(d *capacity.Deployment) *string { return &d.Engine.SchedulingPolicy }), "scheduling_policy"},
	{"max_waiting", "sim-max-waiting", "admission-control", intSetting(func(d *capacity.Deployment) *int { return &d.Engine.MaxWaiting }), "max_waiting"},
	{"cache_dtype", "sim-kv-cache-dtype", "kv-cache-dtype", stringSetting(func(d *capacity.Deployment) *string { return &d.Engine.KVCacheDType }), "kv_cache_dtype"},
	{"dtype", "sim-dtype", "weights", stringSetting(func(d *capacity.Deployment) *string { return &d.Engine.DType }), "dtype"},
	{"tensor_parallel_size", "sim-tensor-parallel-size", "tensor-parallel", intSetting(func(d *capacity.Deployment) *int { return &d.Engine.TensorParallelSize }), "tensor_parallel_size"},
	{"speculative_k", "sim-speculative-k", "speculative-decoding", intSetting(func(d *capacity.Deployment) *int { return &d.Engine.SpeculativeK }), "speculative_k"},
	{"block_size", "sim-block-size", "block-size", intSetting(func(d *capacity.Deployment) *int { return &d.Engine.BlockSize }), "block_size"},
	{"gpu_memory_utilization", "sim-gpu-memory-utilization", "gpu-memory-utilization", func(d *capacity.Deployment, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0 && f <= 1) {
			return fmt.Errorf("%q is not a fraction in (0, 1]", v)
		}
		d.Engine.GPUMemoryUtilization = f
		return nil
	}, "gpu_memory_utilization"},
	{"replicas", "replicas", "replicas", intSetting(func(d *capacity.Deployment) *int { return &d.Replicas }), "replicas"},
	{"balancer", "balancer", "routing-policy", func(d *capacity.Deployment, v string) error {
		if !slices.Contains(route.Names, v) {
			return fmt.Errorf("%q is not one of %s", v, strings.Join(route.Names, ", "))
		}
		d.Balancer = v
		return nil
	}, "balancer"},
	// The gateway's admission limit: checked here, folded into the
	// engines by foldGateway once every change is applied.
	{keyGatewayConcurrency, "gateway-concurrency", "gateway-admission", intSetting(func(*capacity.Deployment) *int { return new(int) }), ""},
	{keyGatewayMaxQueue, "gateway-max-queue", "gateway-admission", intSetting(func(*capacity.Deployment) *int { return new(int) }), ""},
	{"max_max_tokens", "max-max-tokens", "max-tokens-cap", intSetting(func(d *capacity.Deployment) *int { return &d.MaxMaxTokens }), ""},
	// Disaggregated serving: the pools (folded from the gateway's
	// prefill_replicas and replicas by foldPD) and the KV link.
	{keyPDSplit, "pd-split", "disaggregate", applySplit, ""},
	{keyPrefillReplicas, "prefill-replicas", "disaggregate", intSetting(func(d *capacity.Deployment) *int { return &d.PrefillReplicas }), "prefill_replicas"},
	{keyKVLink, "kv-link", "kv-link", applyLink, "kv_link"},
	{"prefill_tensor_parallel_size", "prefill-tensor-parallel-size", "prefill-tp",
		intSetting(func(d *capacity.Deployment) *int { return &d.PrefillTP }), "prefill_tensor_parallel_size"},
	{"prefill_gpu", "prefill-gpu", "prefill-gpu", stringSetting(func(d *capacity.Deployment) *string { return &d.PrefillGPU }), "prefill_gpu"},
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

// loadFields are the workload's settings that shape the load
// (workload.Options' JSON names): a change in any is the lever "load",
// modelled by replaying the second run's workload; so is a change of the
// endpoint or of streaming (RunConfig's).
var loadFields = []string{"rate", "concurrency", "input_tokens", "output_tokens", "prefix_tokens", "prefix_groups",
	"arrival", "burstiness", "turns", "think_time", "trace", "time_scale", "prompts",
	"agent_sessions", "agent_steps", "agent_tools", "tool_latency", "tool_mode"}

// sampleFields draw another sample of the same load: named, not a lever.
var sampleFields = []string{"seed", "requests", "duration", "warmup"}

func settingByKey(k string) (setting, bool) {
	i := slices.IndexFunc(settings, func(s setting) bool { return s.key == k || s.lever == k || s.flag == k })
	if i < 0 {
		return setting{}, false
	}
	return settings[i], true
}

// Run is one results folder's evidence: its run.json and its run's
// configuration, typed (config.json's run; nil when the folder has none).
type Run struct {
	Dir    string
	Info   results.RunInfo
	Config *simulate.RunConfig
}

// ReadRun reads a results folder's evidence: its run.json, with rc the
// run's typed configuration as its config.json holds it (nil for none;
// cli reads it, adapting an older folder's flags).
func ReadRun(dir string, rc *simulate.RunConfig) (Run, error) {
	info, _, err := results.ReadRunInfo(dir)
	if err != nil {
		return Run{}, err
	}
	return Run{Dir: dir, Info: info, Config: rc}, nil
}

func (r Run) server() map[string]string {
	if r.Info.Server == nil {
		return nil
	}
	return r.Info.Server.Config
}

// engineKey is where a run's engine settings are in its fields: the
// simulated engine's (simulate), else the one bench embedded.
func (r Run) engineKey() string {
	if r.Info.Simulated {
		return "engine."
	}
	return "sim_engine."
}

// value is setting k as the run's evidence shows it: the server's, else
// the simulated or embedded engine's, or a simulated deployment's, typed
// setting ("" when none says).
func (r Run) value(k string) string {
	if v, ok := r.server()[k]; ok {
		return v
	}
	s, ok := settingByKey(k)
	if !ok || s.field == "" {
		return ""
	}
	f := fieldsOf(r.Config)
	if v, ok := f[r.engineKey()+s.field]; ok {
		return v
	}
	if r.Info.Simulated {
		return f[s.field]
	}
	return ""
}

// fieldsOf is a run's typed configuration as its settings' values by
// their JSON names, from simulate.Options down ("workload.rate",
// "engine.max_num_seqs", "replicas", "queue.concurrency"), bench's
// embedded engine under "sim_engine." and its streaming as "stream";
// nil for none.
func fieldsOf(rc *simulate.RunConfig) map[string]string {
	if rc == nil {
		return nil
	}
	out := map[string]string{}
	flatten(out, "", reflect.ValueOf(rc.Options))
	if rc.SimEngine != nil {
		flatten(out, "sim_engine.", reflect.ValueOf(*rc.SimEngine))
	}
	if rc.Stream != nil {
		out["stream"] = strconv.FormatBool(*rc.Stream)
	}
	return out
}

// flatten adds a struct's exported fields to out by their JSON names
// behind prefix, nested structs' under their own name and a dot.
func flatten(out map[string]string, prefix string, v reflect.Value) {
	for i := range v.NumField() {
		f := v.Type().Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if fv := v.Field(i); fv.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Time]() {
			flatten(out, prefix+name+".", fv)
		} else {
			out[prefix+name] = fmt.Sprint(fv.Interface())
		}
	}
}

// Diff lists what changed from a to b: the server's exposed
// configuration, the engine's typed settings where the server exposed
// nothing of the same setting, the load, and the rest of the embedded
// engine's settings (named, not modelled). A run's settings come before
// its engine's, each by name.
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
	fa, fb := fieldsOf(a.Config), fieldsOf(b.Config)
	keys := sortedUnion(fa, fb)
	slices.SortStableFunc(keys, func(x, y string) int { return cmp.Compare(isEngineKey(x), isEngineKey(y)) })
	for _, k := range keys {
		va, okA := fa[k]
		vb, okB := fb[k]
		if va == vb || !okA || !okB { // a setting one run did not record is unknown, not changed
			continue
		}
		if c, ok := change(a, b, k, va, vb, seen); ok {
			out = append(out, c)
		}
	}
	return out
}

// isEngineKey orders a run's own settings (0) before its engine's (1).
func isEngineKey(k string) int {
	if strings.HasPrefix(k, "engine.") || strings.HasPrefix(k, "sim_engine.") {
		return 1
	}
	return 0
}

// change is the change of typed setting k from a (the first run) to b,
// va to vb; ok is false for a setting verify does not speak of. seen
// holds the settings the servers' evidence already showed changed.
func change(a, b Run, k, va, vb string, seen map[string]bool) (Change, bool) {
	w, isWorkload := strings.CutPrefix(k, "workload.")
	switch {
	case isWorkload && slices.Contains(loadFields, w), k == "endpoint", k == "stream":
		if w == "" {
			w = k
		}
		return Change{Lever: "load", Setting: w, Before: va, After: vb, Source: loadSource(a), Modeled: true}, true
	case isWorkload && slices.Contains(sampleFields, w):
		return Change{Setting: w, Before: va, After: vb, Source: loadSource(a), Modeled: true,
			Why: "another sample of the same load: the twin replays the second run's requests"}, true
	case strings.HasPrefix(k, "engine."):
		s, ok := settingByField(strings.TrimPrefix(k, "engine."))
		if !ok || !a.Info.Simulated || !b.Info.Simulated || seen[s.key] {
			return Change{}, false
		}
		return classify(s.key, va, vb, "simulated engine"), true
	case strings.HasPrefix(k, "sim_engine."):
		f := strings.TrimPrefix(k, "sim_engine.")
		s, ok := settingByField(f)
		if ok && seen[s.key] {
			return Change{}, false
		}
		if ok {
			f = s.key
		}
		return classify(f, va, vb, "embedded engine"), true
	case k == "replicas":
		src := "bench"
		if a.Info.Simulated {
			src = "simulated deployment"
		}
		return classify(k, va, vb, src), true
	}
	return Change{}, false
}

// settingByField is the setting of a typed engine or deployment field.
func settingByField(f string) (setting, bool) {
	i := slices.IndexFunc(settings, func(s setting) bool { return s.field != "" && s.field == f })
	if i < 0 {
		return setting{}, false
	}
	return settings[i], true
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
