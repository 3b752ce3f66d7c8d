package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// The shipped file parses strictly and holds the four families --engine
// documents.
func TestFamiliesParse(t *testing.T) {
	fs, err := parseFamilies(familiesYAML)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) == 0 {
		t.Fatal("no families")
	}
	if diff := cmp.Diff([]string{"vllm", "sglang", "trtllm", "llamacpp", "ollama"}, FamilyNames()); diff != "" {
		t.Errorf("families (-want +got):\n%s", diff)
	}
	for _, f := range fs {
		if len(f.Sources) == 0 {
			t.Errorf("family %s: no sources", f.Name)
		}
		for _, c := range f.Constants {
			if c.FittedOn == "" {
				t.Errorf("family %s on %s: constants without what they were fitted on", f.Name, c.GPU)
			}
		}
	}
}

func TestParseFamiliesRefuses(t *testing.T) {
	for name, in := range map[string]string{
		"unknown key":   "families:\n- name: a\n  colour: red\n",
		"two names":     "families:\n- name: a\n- name: b\n  aliases: [A]\n",
		"bad fp8 kv":    "families:\n- name: a\n  scheduler: {fp8_kv_cache_dtype: fp7}\n",
		"bad constants": "families:\n- name: a\n  constants:\n  - {gpu: H100-SXM, compute: 2, memory: 0.5, interconnect: 0.5}\n",
	} {
		if _, err := parseFamilies([]byte(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestLookupFamily(t *testing.T) {
	for in, want := range map[string]string{"vllm": "vllm", "vLLM": "vllm", "TensorRT-LLM": "trtllm", "trtllm": "trtllm", "llama.cpp": "llamacpp", "SGLang": "sglang"} {
		f, err := LookupFamily(in)
		if err != nil || f.Name != want {
			t.Errorf("LookupFamily(%q) = %q, %v; want %s", in, f.Name, err, want)
		}
	}
	_, err := LookupFamily("tgi")
	if err == nil || !strings.Contains(err.Error(), "vllm, sglang, trtllm, llamacpp") {
		t.Errorf("unknown engine: %v, want the list of families", err)
	}
	for in, want := range map[string]string{"NIM (TensorRT-LLM)": "trtllm", "vllm/0.8.5": "vllm", "llama-server b5000": "llamacpp"} {
		if f, ok := FamilyOf(in); !ok || f.Name != want {
			t.Errorf("FamilyOf(%q) = %q, %v; want %s", in, f.Name, ok, want)
		}
	}
	if f, ok := FamilyOf("text-generation-inference"); ok {
		t.Errorf("FamilyOf(TGI) = %s", f.Name)
	}
}

// WithEngine sets what the user left, by GPU memory where the engine's
// default depends on it, and never what the user gave.
func TestWithEngine(t *testing.T) {
	base := DefaultOptions()
	cases := []struct {
		name   string
		engine string
		gpu    string
		dtype  string
		given  []string
		want   func(o *Options)
	}{
		{name: "no engine", want: func(o *Options) {}},
		{name: "vllm turns prefix caching on", engine: "vllm", want: func(o *Options) { o.EnablePrefixCaching = true }},
		{name: "sglang on an H100", engine: "sglang", gpu: "H100-SXM", want: func(o *Options) { o.MaxNumBatchedTokens, o.EnablePrefixCaching, o.SeparatePrefill = 8192, true, true }},
		{name: "sglang on an L4", engine: "sglang", gpu: "L4", want: func(o *Options) { o.MaxNumBatchedTokens, o.EnablePrefixCaching, o.SeparatePrefill = 2048, true, true }},
		{name: "sglang on a B200", engine: "sglang", gpu: "B200", want: func(o *Options) { o.MaxNumBatchedTokens, o.EnablePrefixCaching, o.SeparatePrefill = 16384, true, true }},
		{name: "trtllm", engine: "trtllm", want: func(o *Options) {
			o.MaxNumBatchedTokens, o.MaxNumSeqs, o.EnableChunkedPrefill, o.EnablePrefixCaching = 8192, 2048, false, true
			o.PromptFitsStep, o.GuaranteedNoEvict, o.KVFreeFraction = true, true, 0.9
		}},
		{name: "trtllm 0.x", engine: "trtllm@0.21", want: func(o *Options) {
			o.MaxNumBatchedTokens, o.MaxNumSeqs, o.EnableChunkedPrefill, o.EnablePrefixCaching = 8192, 256, false, true
			o.PromptFitsStep, o.GuaranteedNoEvict, o.KVFreeFraction = true, true, 0.9
		}},
		{name: "trtllm fp8 keeps an fp8 cache", engine: "trtllm", dtype: "fp8", want: func(o *Options) {
			o.MaxNumBatchedTokens, o.MaxNumSeqs, o.EnableChunkedPrefill, o.EnablePrefixCaching, o.KVCacheDType = 8192, 2048, false, true, "fp8"
			o.PromptFitsStep, o.GuaranteedNoEvict, o.KVFreeFraction = true, true, 0.9
		}},
		{name: "vllm fp8 keeps auto", engine: "vllm", dtype: "fp8", want: func(o *Options) { o.EnablePrefixCaching = true }},
		{name: "given settings stay", engine: "trtllm", dtype: "fp8", given: []string{"max_num_seqs", "enable_chunked_prefill", "kv_cache_dtype", "enable_prefix_caching"},
			want: func(o *Options) {
				o.MaxNumBatchedTokens, o.PromptFitsStep, o.GuaranteedNoEvict, o.KVFreeFraction = 8192, true, true, 0.9
			}},
		{name: "a given memory share keeps vLLM's sizing", engine: "trtllm", given: []string{"gpu_memory_utilization"}, want: func(o *Options) {
			o.MaxNumBatchedTokens, o.MaxNumSeqs, o.EnableChunkedPrefill, o.EnablePrefixCaching = 8192, 2048, false, true
			o.PromptFitsStep, o.GuaranteedNoEvict = true, true
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := base
			o.Engine = c.engine
			if c.gpu != "" {
				o.GPU = c.gpu
			}
			if c.dtype != "" {
				o.DType = c.dtype
			}
			want := o
			c.want(&want)
			got, err := o.WithEngine(func(f string) bool { return strings.Contains(strings.Join(c.given, " "), f) })
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	o := base
	o.Engine = "tgi"
	if _, err := o.WithEngine(nil); err == nil || !strings.Contains(err.Error(), "engine") {
		t.Errorf("unknown engine: %v", err)
	}
}

// Config times steps with the family's constants for the GPU where it
// ships them, the GPU family's defaults elsewhere; a profile from another
// engine is refused.
func TestFamilyConstants(t *testing.T) {
	est := func(o Options) perfmodel.Efficiency {
		t.Helper()
		_, e, err := o.Config()
		if err != nil {
			t.Fatal(err)
		}
		return e.Config().Eff
	}
	o := DefaultOptions()
	def := est(o)
	o.Engine = "trtllm"
	fam, _ := LookupFamily("trtllm")
	want, ok := fam.ConstantsFor("H100-SXM", perfmodel.BF16)
	if !ok {
		t.Fatal("trtllm ships no H100 constants")
	}
	if got := est(o); got != want || got == def {
		t.Errorf("trtllm on H100: %+v, want %+v (defaults %+v)", got, want, def)
	}
	o.GPU = "L4" // no trtllm constants for it: the GPU family's defaults
	l4, err := perfmodel.LookupGPU("L4")
	if err != nil {
		t.Fatal(err)
	}
	if got := est(o); got != perfmodel.DefaultEfficiency(l4) {
		t.Errorf("trtllm on L4: %+v, want the defaults %+v", got, perfmodel.DefaultEfficiency(l4))
	}
	o.GPU, o.Engine = "H100-SXM", "vllm"
	if got := est(o); got != def {
		t.Errorf("vllm on H100: %+v, want the defaults %+v", got, def)
	}

	prof := perfmodel.Profile{Schema: perfmodel.ProfileSchema, Model: "Llama-3.1-8B", GPU: "H100-SXM", TP: 1, DType: "bf16", KVDType: "bf16", Engine: "vLLM",
		Constants: perfmodel.ProfileFromEfficiency(def), Range: perfmodel.FitRange{BatchMin: 1, BatchMax: 8, InputMin: 1, InputMax: 100, OutputMin: 1, OutputMax: 100}}
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := prof.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	o.Profile, o.Engine = path, "trtllm"
	if _, _, err := o.Config(); err == nil || !strings.Contains(err.Error(), "fitted on engine vLLM, not trtllm") {
		t.Errorf("a vLLM profile under --engine trtllm: %v", err)
	}
	o.Engine = "vllm"
	if _, _, err := o.Config(); err != nil {
		t.Errorf("a vLLM profile under --engine vllm: %v", err)
	}
	_ = os.Remove(path)
}

// llama.cpp's physical batch reaches the performance model (a step of
// more than 512 tokens is several forward passes); the other families run
// a step as one pass.
func TestFamilyUBatch(t *testing.T) {
	for _, tc := range []struct {
		engine string
		want   int
	}{{"", 0}, {"vllm", 0}, {"trtllm", 0}, {"llamacpp", 512}} {
		o := DefaultOptions()
		o.Engine = tc.engine
		o, err := o.WithEngine(nil)
		if err != nil {
			t.Fatal(err)
		}
		_, e, err := o.Config()
		if err != nil {
			t.Fatal(err)
		}
		if got := e.Config().UBatch; got != tc.want {
			t.Errorf("engine %q: ubatch %d, want %d", tc.engine, got, tc.want)
		}
	}
}

// SGLang's releases reach the engine and the performance model as they
// run: prompt work in steps of its own, and through 0.5.7 each step with a
// prompt token paying its layers' eager launches — 976 µs a layer of
// DeepSeek-R1's MLA, 322 µs a layer of Llama-3.1-8B's (0.5.3.post3 reads
// as 0.5.3); the default release replays graphs, as the other families,
// which mix steps too.
func TestFamilySGLangSteps(t *testing.T) {
	for _, tc := range []struct {
		engine, model, gpu, dtype string
		tp                        int
		apart                     bool
		eager                     time.Duration
	}{
		{"sglang@0.5.7", "DeepSeek-R1", "H200", "fp8", 8, true, 976 * time.Microsecond},
		{"sglang@0.5.3.post3", "Llama-3.1-8B", "H100-SXM", "bf16", 1, true, 322 * time.Microsecond},
		{"sglang", "DeepSeek-R1", "H200", "fp8", 8, true, 976 * time.Microsecond},
		{"sglang@0.5.12", "DeepSeek-R1", "H200", "fp8", 8, true, 976 * time.Microsecond},
		{"sglang@0.5.12", "Llama-3.1-8B", "H100-SXM", "bf16", 1, true, 0},
		{"vllm", "Llama-3.1-8B", "H100-SXM", "bf16", 1, false, 0},
		{"trtllm", "Llama-3.1-8B", "H100-SXM", "bf16", 1, false, 0},
		{"", "Llama-3.1-8B", "H100-SXM", "bf16", 1, false, 0},
	} {
		o := DefaultOptions()
		o.Engine, o.Model, o.GPU, o.DType, o.TensorParallelSize = tc.engine, tc.model, tc.gpu, tc.dtype, tc.tp
		o, err := o.WithEngine(nil)
		if err != nil {
			t.Fatal(err)
		}
		c, e, err := o.Config()
		if err != nil {
			t.Fatal(err)
		}
		if c.SeparatePrefill != tc.apart || e.Config().EagerLayer != tc.eager {
			t.Errorf("engine %q, %s: separate prefill %v, eager layer %v; want %v, %v", tc.engine, tc.model, c.SeparatePrefill, e.Config().EagerLayer, tc.apart, tc.eager)
		}
		// After 0.5.7 SGLang replays piecewise graphs of prompt steps up
		// to 2,048 tokens for MLA models; through 0.5.7, none.
		wantAbove := 0
		if tc.eager > 0 && (tc.engine == "sglang" || tc.engine == "sglang@0.5.12") {
			wantAbove = 2048
		}
		if got := e.Config().EagerAbove; got != wantAbove {
			t.Errorf("engine %q, %s: eager above %d tokens, want %d", tc.engine, tc.model, got, wantAbove)
		}
	}
}
