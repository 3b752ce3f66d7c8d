package perfmodel

import (
	"errors"
	"strings"
	"testing"
)

func TestBuiltinCatalogs(t *testing.T) {
	if _, err := builtinGPUs(); err != nil {
		t.Fatal(err)
	}
	if _, err := builtinModels(); err != nil {
		t.Fatal(err)
	}
	want := []string{"A100-40GB", "A100-80GB-SXM", "A100-80GB-PCIe", "H100-SXM", "H100-PCIe", "H200", "B200", "L4", "L40S", "A10G", "RTX-4090", "MI300X"}
	for _, n := range want {
		g, err := LookupGPU(n)
		if err != nil {
			t.Errorf("GPU %s: %v", n, err)
			continue
		}
		if g.Source == "" || g.PeakFLOPS[BF16] <= 0 || g.HBMBandwidth <= 0 || g.MemoryBytes <= 0 || g.InterconnectBW <= 0 {
			t.Errorf("GPU %s incomplete: %+v", n, g)
		}
	}
	for _, n := range []string{"Llama-3.1-8B", "Llama-3.1-70B", "Llama-3.1-405B", "Llama-2-7B", "Llama-2-70B", "Mistral-7B", "Qwen2.5-7B", "Qwen2.5-72B", "Mixtral-8x7B", "DeepSeek-V3"} {
		m, err := LookupModel(n)
		if err != nil {
			t.Errorf("model %s: %v", n, err)
			continue
		}
		if m.Source == "" {
			t.Errorf("model %s has no source", n)
		}
	}
}

// Hand-computed parameter counts from each model's config.json.
func TestParamCounts(t *testing.T) {
	tests := []struct {
		model         string
		total, active float64 // billions
	}{
		// Llama-3.1-8B: embed 128256×4096 = 525.34M, untied head the same;
		// per layer q,o 2×4096² + k,v 2×4096×1024 + MLP 3×4096×14336 + 2 norms
		// = 218.11M; × 32 + 2 × 525.34M + 4096 = 8.0303B.
		{"Llama-3.1-8B", 8.0303, 8.0303 - 0.52534},
		// Llama-2-70B: 68.98B (the "70B").
		{"Llama-2-70B", 68.977, 68.977 - 0.262},
		// Mixtral-8x7B: 46.7B total, 12.9B active per token (incl. input embedding): 12.75B without it.
		{"Mixtral-8x7B", 46.703, 12.749},
		// DeepSeek-V3: 671B total, 37B active (36.6B without the input embedding).
		{"DeepSeek-V3", 671.03, 36.63},
	}
	for _, tt := range tests {
		m, err := LookupModel(tt.model)
		if err != nil {
			t.Fatal(err)
		}
		total := float64(m.TotalParams()) / 1e9
		active := float64(m.ActiveParams()) / 1e9
		if rel(total, tt.total) > 0.0005 || rel(active, tt.active) > 0.001 {
			t.Errorf("%s: total %.4fB active %.4fB, want %.4fB / %.4fB", tt.model, total, active, tt.total, tt.active)
		}
	}
}

func rel(got, want float64) float64 {
	if want == 0 {
		return got
	}
	d := (got - want) / want
	if d < 0 {
		return -d
	}
	return d
}

func TestUnknownNamesSuggest(t *testing.T) {
	_, err := LookupGPU("H100 SMX")
	var un *UnknownNameError
	if !errors.As(err, &un) || un.Nearest != "H100-SXM" || !strings.Contains(err.Error(), "MI300X") {
		t.Errorf("LookupGPU: %v", err)
	}
	_, err = LookupModel("llama-3.1-7b")
	if !errors.As(err, &un) || un.Nearest != "Llama-3.1-8B" || !strings.Contains(err.Error(), "DeepSeek-V3") {
		t.Errorf("LookupModel: %v", err)
	}
	for _, alias := range []string{"meta-llama/Llama-3.1-8B-Instruct", "llama3.1-8b", "LLAMA_3.1_8B"} {
		if m, err := LookupModel(alias); err != nil || m.Name != "Llama-3.1-8B" {
			t.Errorf("LookupModel(%q) = %v, %v", alias, m.Name, err)
		}
	}
}
