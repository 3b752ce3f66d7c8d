package engine

import (
	_ "embed"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// A Family is a serving engine as --engine names it: the scheduler
// defaults that engine starts with and, per GPU, the performance model's
// constants fitted on public measurements of it. The families ship in
// families.yaml; docs/engines.md ("Engine families") gives each one's
// sources and the rows its constants were fitted on and checked against.
type Family struct {
	// Name is the flag's value: vllm, sglang, trtllm, llamacpp, ollama.
	Name string `yaml:"name"`
	// Title is the engine's own spelling.
	Title string `yaml:"title"`
	// Aliases are other names the engine goes by (in server headers,
	// public measurements, profiles), matched without case.
	Aliases []string `yaml:"aliases"`
	// Version is the engine release the scheduler defaults describe: the
	// family's default (the newest release it ships), or the one asked
	// for as name@version (LookupFamily).
	Version   string           `yaml:"version"`
	Scheduler FamilyScheduler  `yaml:"scheduler"`
	Constants []FamilyConstant `yaml:"constants"`
	// Sources are the URLs the scheduler defaults were read from.
	Sources []string `yaml:"sources"`
	// Older are earlier releases whose scheduler defaults differ, newest
	// first: name@version takes the last one whose Before is above version.
	Older []FamilyRelease `yaml:"older"`
}

// FamilyRelease is an earlier engine release's scheduler defaults: those
// of the releases before Before.
type FamilyRelease struct {
	Version   string          `yaml:"version"`
	Before    string          `yaml:"before"`
	Scheduler FamilyScheduler `yaml:"scheduler"`
	Sources   []string        `yaml:"sources"`
}

// FamilyScheduler is an engine's scheduler defaults, in vLLM's names.
type FamilyScheduler struct {
	// MaxNumBatchedTokens is the token budget per step by GPU memory (the
	// first step whose bound the GPU is below); none: vLLM's default for
	// the GPU (DefaultBatchLimits).
	MaxNumBatchedTokens []ByMemory `yaml:"max_num_batched_tokens"`
	// MaxNumSeqs is the most running requests per step by GPU memory;
	// none: vLLM's default for the GPU.
	MaxNumSeqs           []ByMemory `yaml:"max_num_seqs"`
	EnableChunkedPrefill bool       `yaml:"enable_chunked_prefill"`
	EnablePrefixCaching  bool       `yaml:"enable_prefix_caching"`
	// FP8KVCacheDType is the KV cache precision the engine takes for FP8
	// weights when none is given: "fp8" where an FP8 checkpoint's KV
	// scales put the cache in FP8; empty keeps auto (the weights' if
	// 16-bit, else bf16).
	FP8KVCacheDType string `yaml:"fp8_kv_cache_dtype"`
	// PromptFitsStep: with chunked prefill off, the token budget must hold
	// a request's prompt, not its whole sequence (Config.PromptFitsStep).
	PromptFitsStep bool `yaml:"prompt_fits_step,omitempty"`
	// GuaranteedNoEvict: requests are admitted with KV for their prompt
	// and max_tokens reserved, never preempted (Config.GuaranteedNoEvict).
	GuaranteedNoEvict bool `yaml:"guaranteed_no_evict,omitempty"`
	// KVFreeFraction is the share of the memory the weights leave that the
	// KV cache takes (TensorRT-LLM's kv_cache_free_gpu_memory_fraction),
	// used unless gpu_memory_utilization is given; 0: vLLM's
	// gpu_memory_utilization of the whole card.
	KVFreeFraction float64 `yaml:"kv_free_fraction,omitempty"`
	// UBatch is the engine's physical batch, the most tokens one forward
	// pass takes (llama.cpp's -ub): a step of more runs as several passes
	// (perfmodel.Config.UBatch). 0: a step is one pass.
	UBatch int `yaml:"ubatch,omitempty"`
	// IntakeUS is the release's front end, in microseconds: what every
	// request costs before the engine sees it (HTTP, chat template,
	// tokenization, hand-off to the scheduler), a delay taken by many
	// requests at once and counted in the client's TTFT and E2E. Fitted on public closed
	// loops of the release (docs/perfmodel.md, "The front end"); 0: none
	// measured.
	IntakeUS float64 `yaml:"intake_us,omitempty"`
	// SeparatePrefill: prompt work and decodes never share a step
	// (Config.SeparatePrefill; SGLang's enable_mixed_chunk off).
	SeparatePrefill bool `yaml:"separate_prefill,omitempty"`
	// AdmitPerStep: the most waiting requests a step admits
	// (Config.AdmitPerStep; Ollama's runner, 1); 0: no limit.
	AdmitPerStep int `yaml:"admit_per_step,omitempty"`
	// EagerPrefill is the host cost per layer of a step with prompt work
	// where the release captures CUDA graphs of decode steps only
	// (perfmodel.Config.EagerLayer); zero: every step replays a graph.
	EagerPrefill EagerPrefill `yaml:"eager_prefill,omitempty"`
}

// EagerPrefill is a release's cost per layer of a forward pass run
// eagerly, by the layer's kind, each read off a public measurement of
// the same step with and without a captured graph (docs/perfmodel.md,
// "Eager prefill").
type EagerPrefill struct {
	// LayerUS is a layer of grouped-query attention and a dense MLP, in
	// microseconds.
	LayerUS float64 `yaml:"layer_us"`
	// MLALayerUS is a layer of multi-head latent attention (DeepSeek-V3's,
	// with its routed experts), in microseconds.
	MLALayerUS float64 `yaml:"mla_layer_us"`
	// AboveTokens is the most tokens a prompt step may take and still
	// replay a captured graph (perfmodel.Config.EagerAbove): SGLang's
	// piecewise prefill graphs, captured up to 2,048 tokens for MLA
	// models by default. 0: every prompt step runs eagerly.
	AboveTokens int `yaml:"above_tokens,omitempty"`
}

// Layer is e's cost per layer of m's forward pass run eagerly.
func (e EagerPrefill) Layer(m perfmodel.ModelSpec) time.Duration {
	us := e.LayerUS
	if m.Attention == perfmodel.AttnMLA {
		us = e.MLALayerUS
	}
	return time.Duration(us * float64(time.Microsecond))
}

// Above is the most tokens a prompt step of m replays a graph with
// (AboveTokens; perfmodel.Config.EagerAbove), 0 where m's steps are not
// priced eager.
func (e EagerPrefill) Above(m perfmodel.ModelSpec) int {
	if e.Layer(m) == 0 {
		return 0
	}
	return e.AboveTokens
}

// Intake is s's front end per request (IntakeUS).
func (s FamilyScheduler) Intake() time.Duration {
	return time.Duration(s.IntakeUS * float64(time.Microsecond))
}

// ByMemory is one step of a setting that depends on the GPU's memory: the
// value for GPUs with less than BelowGiB (0: any GPU).
type ByMemory struct {
	BelowGiB float64 `yaml:"below_gib"`
	Value    int     `yaml:"value"`
}

// FamilyConstant is a family's fitted constants for one GPU (and, where
// DType is given, one weight precision).
type FamilyConstant struct {
	GPU   string `yaml:"gpu"`
	DType string `yaml:"dtype"`
	// EngineVersion is the engine release the measurements were taken on
	// (a prediction for another major release lies outside the envelope).
	EngineVersion string `yaml:"engine_version"`
	// FittedOn names the measurements fitted (and which were held out).
	FittedOn string `yaml:"fitted_on"`
	// Envelope is the span of those measurements and the interval their
	// held-out residuals give (Options.Envelope).
	Envelope            FittedRange `yaml:"envelope"`
	perfmodel.Constants `yaml:",inline"`
}

// familiesYAML is the shipped families.
//
//go:embed families.yaml
var familiesYAML []byte

// loadFamilies parses the shipped families once.
var loadFamilies = sync.OnceValues(func() ([]Family, error) { return parseFamilies(familiesYAML) })

// parseFamilies reads a families file strictly and checks every family.
func parseFamilies(data []byte) ([]Family, error) {
	var f struct {
		Families []Family `yaml:"families"`
	}
	if err := yaml.UnmarshalWithOptions(data, &f, yaml.DisallowUnknownField()); err != nil {
		return nil, fmt.Errorf("engine families: %w", err)
	}
	owner := map[string]string{}
	for _, fam := range f.Families {
		for _, n := range fam.names() {
			if o, ok := owner[strings.ToLower(n)]; ok && o != fam.Name {
				return nil, fmt.Errorf("engine families: %q names two families", n)
			}
			owner[strings.ToLower(n)] = fam.Name
		}
		if fam.Scheduler.FP8KVCacheDType != "" {
			if _, err := perfmodel.ParseDType(fam.Scheduler.FP8KVCacheDType); err != nil {
				return nil, fmt.Errorf("engine family %s: fp8_kv_cache_dtype: %w", fam.Name, err)
			}
		}
		for _, c := range fam.Constants {
			if err := c.Efficiency().Validate(); err != nil {
				return nil, fmt.Errorf("engine family %s on %s: %w", fam.Name, c.GPU, err)
			}
		}
		if f := fam.Scheduler.KVFreeFraction; f < 0 || f > 1 {
			return nil, fmt.Errorf("engine family %s: kv_free_fraction %g: want a fraction in [0, 1]", fam.Name, f)
		}
		for _, r := range fam.Older {
			if _, err := parseVersion(r.Before); err != nil {
				return nil, fmt.Errorf("engine family %s, release %s: before: %w", fam.Name, r.Version, err)
			}
		}
	}
	return f.Families, nil
}

// Families are the shipped engine families, in the file's order.
func Families() []Family {
	fs, err := loadFamilies()
	if err != nil {
		panic(err) // the embedded file is checked by TestFamiliesParse
	}
	return fs
}

// FamilyNames are the values --engine takes.
func FamilyNames() []string {
	var out []string
	for _, f := range Families() {
		out = append(out, f.Name)
	}
	return out
}

func (f Family) names() []string { return append([]string{f.Name, f.Title}, f.Aliases...) }

// LookupFamily finds a family by its name, title or an alias, without
// case, optionally with @version (vllm@0.11, trtllm@0.21): the scheduler
// defaults of that release (Family.Older) in place of the default's. An
// unknown name is an error listing the families.
func LookupFamily(name string) (Family, error) {
	base, version, hasVersion := strings.Cut(name, "@")
	for _, f := range Families() {
		if slices.ContainsFunc(f.names(), func(n string) bool { return strings.EqualFold(n, base) }) {
			if !hasVersion {
				return f, nil
			}
			return f.release(version)
		}
	}
	return Family{}, fmt.Errorf("unknown engine %q (want %s, optionally @version)", name, strings.Join(FamilyNames(), ", "))
}

// release is f with the scheduler defaults of its release version.
func (f Family) release(version string) (Family, error) {
	v, err := parseVersion(version)
	if err != nil {
		return Family{}, fmt.Errorf("engine %s@%s: %w", f.Name, version, err)
	}
	chosen := Family{Version: f.Version, Scheduler: f.Scheduler, Sources: f.Sources}
	for _, r := range f.Older {
		if b, _ := parseVersion(r.Before); compareVersions(v, b) < 0 {
			chosen = Family{Version: r.Version, Scheduler: r.Scheduler, Sources: r.Sources}
		}
	}
	f.Scheduler, f.Sources = chosen.Scheduler, chosen.Sources
	f.Version = version
	return f, nil
}

// parseVersion reads a dotted release number ("0.11", "1.0.0rc3" reads
// as 1.0.0); a leading v is dropped.
func parseVersion(s string) ([]int, error) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "v")
	if s == "" {
		return nil, fmt.Errorf("empty version")
	}
	var out []int
	for _, part := range strings.Split(s, ".") {
		n, digits := 0, 0
		for _, c := range part {
			if c < '0' || c > '9' {
				break
			}
			n = n*10 + int(c-'0')
			digits++
		}
		if digits == 0 {
			if len(out) > 0 || part == "x" || part == "*" {
				break // a suffix (0.5.3.post3) or a wildcard (0.x)
			}
			return nil, fmt.Errorf("version %q: want numbers separated by dots", s)
		}
		out = append(out, n)
		if digits < len(part) {
			break
		}
	}
	return out, nil
}

// compareVersions orders two parsed versions; missing parts count as 0.
func compareVersions(a, b []int) int {
	for i := range max(len(a), len(b)) {
		var x, y int
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			return x - y
		}
	}
	return 0
}

// SameMajor reports whether two releases share their first number (and,
// for 0.x releases, their second); either empty: true.
func SameMajor(a, b string) bool {
	va, ea := parseVersion(a)
	vb, eb := parseVersion(b)
	if ea != nil || eb != nil || len(va) == 0 || len(vb) == 0 {
		return true
	}
	if va[0] != vb[0] {
		return false
	}
	if va[0] == 0 && len(va) > 1 && len(vb) > 1 {
		return va[1] == vb[1]
	}
	return true
}

// FamilyOf finds the family a free-text engine description names ("NIM
// (TensorRT-LLM)", a server's "vllm/0.8"): the first family one of whose
// names it contains, without case.
func FamilyOf(text string) (Family, bool) {
	t := strings.ToLower(text)
	for _, f := range Families() {
		for _, n := range f.names() {
			if n != "" && strings.Contains(t, strings.ToLower(n)) {
				return f, true
			}
		}
	}
	return Family{}, false
}

// ConstantsFor are the family's constants fitted for gpu and weight
// precision wd: an entry for that precision first, then one for any; false
// when the family has none for the GPU (the GPU family's defaults stand).
func (f Family) ConstantsFor(gpu string, wd perfmodel.DType) (perfmodel.Efficiency, bool) {
	c, ok := f.constantFor(gpu, wd)
	if !ok {
		return perfmodel.Efficiency{}, false
	}
	return c.Efficiency(), true
}

// BatchLimits are the family's token budget per step and bound on running
// requests for a GPU of memBytes; 0 where the family keeps vLLM's default
// for the GPU (DefaultBatchLimits).
func (f Family) BatchLimits(memBytes int64) (maxTokens, maxSeqs int) {
	return byMemory(f.Scheduler.MaxNumBatchedTokens, memBytes), byMemory(f.Scheduler.MaxNumSeqs, memBytes)
}

// byMemory is the value of steps for a GPU of memBytes; 0 when none.
func byMemory(steps []ByMemory, memBytes int64) int {
	gib := float64(memBytes) / (1 << 30)
	for _, s := range steps {
		if s.BelowGiB == 0 || gib < s.BelowGiB {
			return s.Value
		}
	}
	return 0
}

// WithEngine returns o with its engine family's scheduler defaults (the
// token budget and running-request bound for its GPU, chunked prefill,
// prefix caching, the KV cache precision of FP8 weights) in every setting
// given reports the user did not set (given nil: none set). Options
// without an engine are returned as they are. Config then times the
// steps with the family's constants for the GPU; a CLI or config file
// applies WithEngine first, once its settings are read.
func (o Options) WithEngine(given func(field string) bool) (Options, error) {
	if o.Engine == "" {
		return o, nil
	}
	fam, err := LookupFamily(o.Engine)
	if err != nil {
		return o, field.Wrap("engine", err)
	}
	set := func(name string) bool { return given == nil || !given(name) }
	s := fam.Scheduler
	if len(s.MaxNumBatchedTokens) > 0 || len(s.MaxNumSeqs) > 0 {
		cat, err := perfmodel.GPUCatalogFor(o.GPUFile)
		if err != nil {
			return o, field.Wrap("gpu_file", err)
		}
		gpu, err := cat.Lookup(o.GPU)
		if err != nil {
			return o, field.Wrap("gpu", err)
		}
		tokens, seqs := fam.BatchLimits(gpu.MemoryBytes)
		if tokens > 0 && set("max_num_batched_tokens") {
			o.MaxNumBatchedTokens = tokens
		}
		if seqs > 0 && set("max_num_seqs") {
			o.MaxNumSeqs = seqs
		}
	}
	if set("enable_chunked_prefill") {
		o.EnableChunkedPrefill = s.EnableChunkedPrefill
	}
	o.PromptFitsStep, o.GuaranteedNoEvict, o.SeparatePrefill = s.PromptFitsStep, s.GuaranteedNoEvict, s.SeparatePrefill
	o.AdmitPerStep = s.AdmitPerStep
	if s.KVFreeFraction > 0 && set("gpu_memory_utilization") {
		o.KVFreeFraction = s.KVFreeFraction
	}
	// Without chunked prefill vLLM's rule (the budget holds the whole
	// sequence) caps the context at the token budget, unless the user says
	// otherwise; under PromptFitsStep only the prompt must fit a step.
	if !o.EnableChunkedPrefill && !o.PromptFitsStep && o.MaxNumBatchedTokens > 0 && o.MaxModelLen == 0 && set("max_model_len") {
		o.MaxModelLen = o.MaxNumBatchedTokens
	}
	if set("enable_prefix_caching") {
		o.EnablePrefixCaching = s.EnablePrefixCaching
	}
	if s.FP8KVCacheDType != "" && set("kv_cache_dtype") && (o.KVCacheDType == "" || o.KVCacheDType == "auto") && strings.EqualFold(o.DType, string(perfmodel.FP8)) {
		o.KVCacheDType = s.FP8KVCacheDType
	}
	return o, nil
}

// EngineConstants are the constants o's engine family ships for its GPU
// and weight precision, as Config times steps with them (estimate, which
// prices steps without an engine, takes them here); false when o has no
// engine or the family none for the GPU.
func (o Options) EngineConstants() (perfmodel.Efficiency, bool, error) {
	if o.Engine == "" {
		return perfmodel.Efficiency{}, false, nil
	}
	pc, err := o.perfConfig()
	if err != nil {
		return perfmodel.Efficiency{}, false, err
	}
	return o.familyConstants(pc.GPU.Name, pc.WeightDType)
}

// familyConstants are the constants o's engine family ships for its GPU
// and weights, when it has an engine and the family has them.
func (o Options) familyConstants(gpu string, wd perfmodel.DType) (perfmodel.Efficiency, bool, error) {
	if o.Engine == "" {
		return perfmodel.Efficiency{}, false, nil
	}
	fam, err := LookupFamily(o.Engine)
	if err != nil {
		return perfmodel.Efficiency{}, false, field.Wrap("engine", err)
	}
	eff, ok := fam.ConstantsFor(gpu, wd)
	return eff, ok, nil
}

// familyUBatch is o's engine family's physical batch (0: none, or no
// engine).
func (o Options) familyUBatch() int {
	if o.Engine == "" {
		return 0
	}
	fam, err := LookupFamily(o.Engine)
	if err != nil {
		return 0
	}
	return fam.Scheduler.UBatch
}

// familyEagerLayer is o's engine family's cost per layer of m's prompt
// steps run eagerly (0: none, or no engine) and the most tokens a prompt
// step replays a graph with (EagerPrefill.AboveTokens).
func (o Options) familyEagerLayer(m perfmodel.ModelSpec) (time.Duration, int) {
	if o.Engine == "" {
		return 0, 0
	}
	fam, err := LookupFamily(o.Engine)
	if err != nil {
		return 0, 0
	}
	return fam.Scheduler.EagerPrefill.Layer(m), fam.Scheduler.EagerPrefill.Above(m)
}

// FrontEnd is the front end per request of o's engine family at its
// release (FamilyScheduler.Intake, fitted on public closed loops): what
// simulate adds before the engine sees each request, as calibrate's
// Predict does. 0 without an engine, or for a release that carries none.
func (o Options) FrontEnd() (time.Duration, error) {
	if o.Engine == "" {
		return 0, nil
	}
	fam, err := LookupFamily(o.Engine)
	if err != nil {
		return 0, field.Wrap("engine", err)
	}
	return fam.Scheduler.Intake(), nil
}
