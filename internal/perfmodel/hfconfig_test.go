package perfmodel

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// Each test config.json loads to the same shape as the catalog entry.
func TestLoadModelConfigMatchesCatalog(t *testing.T) {
	tests := []struct{ file, catalog string }{
		{"llama-3.1-8b.json", "Llama-3.1-8B"},
		{"mixtral-8x7b.json", "Mixtral-8x7B"},
		{"deepseek-v3.json", "DeepSeek-V3"},
	}
	ignore := cmpopts.IgnoreFields(ModelSpec{}, "Name", "Source", "Aliases")
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := LoadModelConfig(filepath.Join("testdata", "configs", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(mustModel(t, tt.catalog), got, ignore); diff != "" {
				t.Errorf("config.json vs catalog (-catalog +config):\n%s", diff)
			}
		})
	}
	// Llama-3.1-8B parameter count from its config ≈ 8.03 B.
	m, err := ResolveModel("testdata/configs/llama-3.1-8b.json")
	if err != nil {
		t.Fatal(err)
	}
	if got := float64(m.TotalParams()) / 1e9; got < 8.02 || got > 8.04 {
		t.Errorf("params %.4f B, want ≈ 8.03", got)
	}
}

func TestParseModelConfigErrors(t *testing.T) {
	tests := []struct {
		name, json, want string
	}{
		{"not json", `{"hidden_size": 4096`, "not a JSON object"},
		{"array", `[1,2]`, "not a JSON object"},
		{"missing layers", `{"hidden_size": 4096, "num_attention_heads": 32, "vocab_size": 100, "intermediate_size": 10}`, `missing field "num_hidden_layers"`},
		{"missing vocab", `{"num_hidden_layers": 2, "hidden_size": 4096, "num_attention_heads": 32, "intermediate_size": 10}`, `missing field "vocab_size"`},
		{"string layers", `{"num_hidden_layers": "two", "hidden_size": 4096, "num_attention_heads": 32, "vocab_size": 10, "intermediate_size": 10}`, `field "num_hidden_layers" must be a number`},
		{"fractional", `{"num_hidden_layers": 2.5, "hidden_size": 4096, "num_attention_heads": 32, "vocab_size": 10, "intermediate_size": 10}`, "non-negative integer"},
		{"zero heads", `{"num_hidden_layers": 2, "hidden_size": 4096, "num_attention_heads": 0, "vocab_size": 10, "intermediate_size": 10}`, `"num_attention_heads" must be > 0`},
		{"moe without k", `{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 10, "num_local_experts": 8}`, `missing field "num_experts_per_tok"`},
		{"mla without rope", `{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 10, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "v_head_dim": 8}`, `missing field "qk_rope_head_dim"`},
		{"bad gqa", `{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 3, "vocab_size": 10, "intermediate_size": 10}`, "multiple of kv_heads"},
		{"bad tie", `{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 10, "tie_word_embeddings": "yes"}`, `"tie_word_embeddings" must be true or false`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseModelConfig([]byte(tt.json), "x")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
	if _, err := LoadModelConfig("testdata/configs/nope.json"); err == nil {
		t.Error("missing file accepted")
	}
	if _, err := ResolveModel("nope/config.json"); err == nil || !strings.Contains(err.Error(), "model config") {
		t.Errorf("ResolveModel of a missing .json: %v", err)
	}
}

func TestParseModelConfigTextConfig(t *testing.T) {
	js := `{"_name_or_path": "org/vlm", "text_config": {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 10}}`
	m, err := ParseModelConfig([]byte(js), "x")
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "vlm" || m.Layers != 2 || m.KVHeads != 4 || m.HeadDim != 16 || m.Attention != AttnMHA {
		t.Errorf("%+v", m)
	}
}

// Any bytes: an error or a valid model, never a panic, and a model that
// loads always gives finite, positive step times.
func FuzzParseModelConfig(f *testing.F) {
	for _, name := range []string{"llama-3.1-8b.json", "mixtral-8x7b.json", "deepseek-v3.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", "configs", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 10}`))
	f.Add([]byte(`{"num_hidden_layers": 1, "hidden_size": 8, "num_attention_heads": 2, "vocab_size": 1, "intermediate_size": 1, "num_local_experts": 2, "num_experts_per_tok": 1}`))
	f.Add([]byte(`{"text_config": {}}`))
	f.Add([]byte(`null`))
	gpu, err := LookupGPU("H100-SXM")
	if err != nil {
		f.Fatal(err)
	}
	gpu.MemoryBytes = 1 << 62
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseModelConfig(data, "fuzz")
		if err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("parsed model fails Validate: %v", err)
		}
		e, err := New(Config{Model: m, GPU: gpu})
		if err != nil {
			return // e.g. too large for any memory
		}
		var b Batch
		b.Add(16, 16)
		b.Add(1, 100)
		if st := e.StepTime(&b); st <= 0 {
			t.Fatalf("step time %v for %+v", st, m)
		}
	})
}
