package perfmodel

import (
	"math"
	"testing"
)

// The 2025 models' parameter counts from their shapes agree with their
// model cards' totals (billions) within 3 % and their active counts within
// 10 % (cards differ on counting the embedding table).
func TestCatalog2025Params(t *testing.T) {
	for _, c := range []struct {
		name          string
		total, active float64
	}{
		{"Qwen3-8B", 8.2, 0}, {"Qwen3-32B", 32.8, 0}, {"Qwen3-30B-A3B", 30.5, 3.3}, {"Qwen3-235B-A22B", 235, 22},
		{"gpt-oss-20b", 20.9, 3.6}, {"gpt-oss-120b", 116.8, 5.1}, {"Llama-4-Scout-17B-16E", 109, 17}, {"Llama-4-Maverick-17B-128E", 400, 17},
		{"GLM-4.5", 355, 32}, {"GLM-4.5-Air", 106, 12}, {"DeepSeek-R1", 671, 37},
	} {
		m, err := LookupModel(c.name)
		if err != nil {
			t.Fatal(err)
		}
		near := func(got, want, tol float64) bool { return want == 0 || math.Abs(got-want)/want <= tol }
		total, active := float64(m.TotalParams())/1e9, float64(m.ActiveParams())/1e9
		if !near(total, c.total, 0.03) {
			t.Errorf("%s: %.1fB parameters, the card says %gB", c.name, total, c.total)
		}
		if !near(active, c.active, 0.1) {
			t.Errorf("%s: %.1fB active, the card says %gB", c.name, active, c.active)
		}
	}
}

// MXFP4 and NVFP4 weights take their scales' bytes, and run on the FP4
// tensor cores where the GPU has them (B200), else dequantized to 16-bit.
func TestFP4Weights(t *testing.T) {
	if MXFP4.Bytes() != 0.53125 || NVFP4.Bytes() != 0.5625 {
		t.Errorf("bytes: mxfp4 %g, nvfp4 %g", MXFP4.Bytes(), NVFP4.Bytes())
	}
	b200, _ := LookupGPU("B200")
	h100, _ := LookupGPU("H100-SXM")
	if b200.ComputeDType(MXFP4) != NVFP4 || h100.ComputeDType(MXFP4) != BF16 || h100.ComputeDType(NVFP4) != BF16 {
		t.Errorf("compute: B200 %s, H100 %s", b200.ComputeDType(MXFP4), h100.ComputeDType(MXFP4))
	}
	if d, err := ParseDType("MXFP4"); err != nil || d != MXFP4 {
		t.Errorf("ParseDType(MXFP4) = %s, %v", d, err)
	}
	for name, want := range map[string]int{"GLM-4.5": 32, "Llama-4-Scout-17B-16E": 8, "Llama-3.1-8B": 32, "DeepSeek-R1": 64} {
		m, _ := LookupModel(name)
		if got := LargestTP(m); got != want {
			t.Errorf("LargestTP(%s) = %d, want %d", name, got, want)
		}
	}
}

// KVFreeFraction sizes the KV cache as TensorRT-LLM does: that share of
// the memory the weights and the reserve leave.
func TestKVFreeFraction(t *testing.T) {
	m, _ := LookupModel("Llama-3.1-8B")
	g, _ := LookupGPU("H100-SXM")
	e, err := New(Config{Model: m, GPU: g, TP: 1, KVFreeFraction: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	free := float64(g.MemoryBytes - e.Config().ReserveBytes - e.WeightBytes())
	if want := int64(0.9 * free / float64(e.KVBytesPerToken())); e.KVCapacityTokens() != want {
		t.Errorf("KV capacity %d tokens, want 0.9 × %.0f B / %d B = %d", e.KVCapacityTokens(), free, e.KVBytesPerToken(), want)
	}
	if _, err := New(Config{Model: m, GPU: g, TP: 1, KVFreeFraction: 1.5}); err == nil {
		t.Error("a KV free fraction of 1.5 was accepted")
	}
}
