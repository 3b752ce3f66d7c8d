package whatif

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/capacity"
	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/report"
)

// A twin of llama.cpp's server on one CPU thread (bench --sim-engine
// llamacpp --sim-gpu cpu-zen5-1t, or a profile that says engine:
// llamacpp) is offered only levers llama-server has, in its own settings:
// -b and -np, GGUF quantizations; no disaggregation, chunked-prefill
// switch, priority scheduling, fp8 or tensor parallelism (issue #37).
func TestLlamaCppTwinLevers(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfg, []byte(`{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":640,`+
		`"intermediate_size":1728,"num_hidden_layers":10,"num_attention_heads":10,"num_key_value_heads":2,`+
		`"vocab_size":32000,"max_position_embeddings":4096,"torch_dtype":"bfloat16"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	o := engine.DefaultOptions()
	o.Engine, o.GPU, o.Model = "llamacpp", "cpu-zen5-1t", cfg
	o, err := o.WithEngine(nil)
	if err != nil {
		t.Fatal(err)
	}
	rep := &report.Report{}
	for _, rule := range []string{report.RulePrefillInterference, report.RuleStalls, report.RuleServerQueueing,
		report.RuleKVCache, report.RuleDecodeBandwidth, report.RulePrefillBound} {
		rep.Findings = append(rep.Findings, report.Finding{Rule: rule})
	}
	r := &runner{b: Baseline{Deployment: capacity.Deployment{Engine: o, Replicas: 1}}, o: Options{SpeculativeK: 4, SpeculativeAlpha: 0.7}}
	if err := r.prepare(rep); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, v := range r.variants(rep) {
		lines = append(lines, v.title+" ("+v.setting+")")
	}
	all := strings.Join(lines, "\n") + "\n" + r.baseName
	t.Log(all)
	for _, bad := range []string{"max_num_batched_tokens", "max_num_seqs", "tensor parallel", "disaggregat", "fp8",
		"chunked prefill", "priority scheduling", "dtype:"} {
		if strings.Contains(all, bad) {
			t.Errorf("the llama.cpp twin is offered %q:\n%s", bad, all)
		}
	}
	for _, want := range []string{"(-b/--batch-size: 2048 → ", "slots (-np) (-np/--parallel: 4 → 8)", "Q8_0 weights", "slots (-np) 4, batch (-b) 2048"} {
		if !strings.Contains(all, want) {
			t.Errorf("lacks %q:\n%s", want, all)
		}
	}
}

// "falls behind" is defined wherever a prediction says it.
func TestFallsBehindDefined(t *testing.T) {
	if !strings.HasPrefix(FallsBehind, "falls behind: ") || !strings.Contains(FallsBehind, "95%") {
		t.Errorf("FallsBehind %q does not define the words", FallsBehind)
	}
}
