package perfmodel

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestParseGPUCatalogErrors(t *testing.T) {
	tests := []struct{ yaml, want string }{
		{"- name: X\n  memory_gib: 0\n  hbm_gb_s: 1\n  bf16_tflops: 1\n  interconnect_gb_s: 1\n", "memory_gib must be > 0"},
		{"- name: X\n  memory_gib: 1\n  hbm_gb_s: 1\n  interconnect_gb_s: 1\n", "bf16_tflops must be > 0"},
		{"- name: X\n  memory_gib: 1\n  hbm_gb_s: 1\n  bf16_tflops: 1\n  interconnect_gb_s: 1\n  fp8_tflops: -1\n", "negative peak"},
		{"- name: X\n  memory_gib: 1\n  hbm_gb_s: 1\n  bf16_tflops: 1\n  interconnect_gb_s: 1\n  cache_mib: 32\n", "cache_mib and cache_gb_s"},
		{"- name: X\n  memory_gib: 1\n  hbm_gb_s: 1\n  bf16_tflops: 1\n  interconnect_gb_s: 1\n  cache_gb_s: 80\n", "cache_mib and cache_gb_s"},
		{"- name: X\n  memory_gib: 1\n  hbm_gb_s: 1\n  bf16_tflops: 1\n  interconnect_gb_s: 1\n  cache_mib: -1\n  cache_gb_s: 80\n", "cache_mib and cache_gb_s"},
		{"- name: X\n  memory: 1\n", "unknown field"},
		{"- memory_gib: 1\n", "no name"},
		{"[]", "no GPUs"},
		{"{", "GPU catalog"},
	}
	for _, tt := range tests {
		if _, err := ParseGPUCatalog([]byte(tt.yaml)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want %q", tt.yaml, err, tt.want)
		}
	}
}

func TestGPUCatalogOverrideAndAliases(t *testing.T) {
	over, err := ParseGPUCatalog([]byte("- name: h100 sxm\n  memory_gib: 94\n  hbm_gb_s: 3900\n  bf16_tflops: 989\n  interconnect_gb_s: 450\n  source: test\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := NewGPUCatalog(BuiltinGPUs().GPUs(), over)
	g, err := c.Lookup("H100-SXM")
	if err != nil || g.HBMBandwidth != 3900e9 {
		t.Errorf("override: %+v, %v", g, err)
	}
	if len(c.Names()) != len(BuiltinGPUs().Names()) {
		t.Errorf("override added a GPU instead of replacing: %v", c.Names())
	}
	for _, alias := range []string{"h100", "A100", "mi300x", "rtx4090", "a100-40gb-sxm"} {
		if _, err := LookupGPU(alias); err != nil {
			t.Errorf("alias %q: %v", alias, err)
		}
	}
	var un *UnknownNameError
	if _, err := c.Lookup("TPUv5e"); !errors.As(err, &un) || len(un.Known) != len(c.Names()) {
		t.Errorf("unknown: %v", err)
	}
}

// Any bytes: an error or GPUs with positive rates, never a panic.
func FuzzParseGPUCatalog(f *testing.F) {
	data, err := os.ReadFile("gpus.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte("- name: X\n  memory_gib: 1\n  hbm_gb_s: 1\n  bf16_tflops: 1\n  interconnect_gb_s: 1\n"))
	f.Add([]byte("- {name: Y, memory_gib: 2, hbm_gb_s: 3, bf16_tflops: 4, interconnect_gb_s: 5, fp8_tflops: 8}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		gs, err := ParseGPUCatalog(data)
		if err != nil {
			return
		}
		for _, g := range gs {
			if g.Name == "" || !(g.HBMBandwidth > 0) || !(g.PeakFLOPS[BF16] > 0) || !(g.InterconnectBW > 0) {
				t.Fatalf("accepted an unusable GPU: %+v", g)
			}
		}
		NewGPUCatalog(gs)
	})
}

func TestPlanEfficiencyOverrides(t *testing.T) {
	base, err := Plan(Request{Model: "Llama-3.1-8B", GPU: "H100-SXM", Input: 512, Output: 64, Batches: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	half := 0.4
	zero := Roofline().StepOverhead // 0
	slow, err := Plan(Request{Model: "Llama-3.1-8B", GPU: "H100-SXM", Input: 512, Output: 64, Batches: []int{1},
		Eff: EffOverride{Memory: &half, StepOverhead: &zero}})
	if err != nil {
		t.Fatal(err)
	}
	b, s := base.Rows[0].Decode, slow.Rows[0].Decode
	if s.Memory != 2*b.Memory && (s.Memory-2*b.Memory > 1 || 2*b.Memory-s.Memory > 1) {
		t.Errorf("memory time %v, want twice %v", s.Memory, b.Memory)
	}
	if want := time25us(32) + DefaultEfficiency(mustGPU(t, "H100-SXM")).SeqOverhead; s.Overhead != want {
		t.Errorf("overhead %v, want 32 layers × 25 µs and one sequence's overhead only (%v)", s.Overhead, want)
	}
	bad := 1.5
	if _, err := Plan(Request{Model: "Llama-3.1-8B", GPU: "H100-SXM", Input: 1, Output: 1, Batches: []int{1}, Eff: EffOverride{Compute: &bad}}); err == nil {
		t.Error("compute efficiency 1.5 accepted")
	}
}

// go-yaml v1.19.2 panics on this input (found by FuzzParseGPUCatalog); the
// parsers must answer with an error instead.
func TestYAMLDecoderPanicBecomesError(t *testing.T) {
	in := []byte("! {000000000000000000000000000000000000000000000000000000000000000000000000000000000000}")
	if _, err := ParseGPUCatalog(in); err == nil {
		t.Error("GPU catalog accepted")
	}
	if _, err := ParseModelCatalog(in); err == nil {
		t.Error("model catalog accepted")
	}
}

func FuzzParseModelCatalog(f *testing.F) {
	data, err := os.ReadFile("models.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte("- {name: T, layers: 1, hidden: 8, heads: 2, vocab: 3, intermediate: 4}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ms, err := ParseModelCatalog(data)
		if err != nil {
			return
		}
		for _, m := range ms {
			if err := m.Validate(); err != nil {
				t.Fatalf("accepted an invalid model: %v", err)
			}
		}
	})
}
