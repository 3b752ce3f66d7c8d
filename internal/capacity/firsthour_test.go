package capacity

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/engine"
)

// A plan's first line names the model it planned for, and an answer that
// quantizes the model says its quality is unchecked (issue #37: plan never
// named the model, and its fp8 answer had no quality note).
func TestPlanNamesModelAndQuality(t *testing.T) {
	answer := func(dtype, kv string) *Candidate {
		return &Candidate{ID: 7, Name: "2 × H100-SXM TP1", GPU: "H100-SXM", TP: 1, GPUs: 2, USDPerHour: 5.38,
			Deployment: Deployment{Replicas: 2, Engine: engine.Options{Model: "Qwen3-8B", DType: dtype, KVCacheDType: kv}}}
	}
	for _, tc := range []struct {
		name, dtype, kv string
		note            []string // "" entries: no note at all
	}{
		{"fp8 weights and KV", "fp8", "fp8", []string{"quality: fp8 weights and fp8 KV cache", "check Qwen3-8B quantized"}},
		{"nvfp4 weights", "nvfp4", "auto", []string{"quality: nvfp4 weights are priced for speed only"}},
		{"bf16", "bf16", "auto", nil},
		{"defaults", "", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := answer(tc.dtype, tc.kv)
			pl := &Plan{Model: "Qwen3-8B", Objective: Objective{SLOs: slos(t, "ttft:p99<=1s"), TargetRate: 40},
				Candidates: []*Candidate{c}, Best: c, Front: []*Candidate{}}
			var b bytes.Buffer
			if err := pl.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			text := b.String()
			if first, _, _ := strings.Cut(text, "\n"); first != "plan: the cheapest deployment of Qwen3-8B that meets ttft:p99<=1s at 40 req/s" {
				t.Errorf("first line %q does not name the model", first)
			}
			for _, s := range tc.note {
				if !strings.Contains(text, s) {
					t.Errorf("the answer lacks %q:\n%s", s, text)
				}
			}
			if len(tc.note) == 0 && strings.Contains(text, "quality:") {
				t.Errorf("a 16-bit answer carries a quality note:\n%s", text)
			}
			b.Reset()
			if err := pl.WriteJSON(&b); err != nil {
				t.Fatal(err)
			}
			var j struct {
				Model       string `json:"model"`
				QualityNote string `json:"quality_note"`
			}
			if err := json.Unmarshal(b.Bytes(), &j); err != nil {
				t.Fatal(err)
			}
			if j.Model != "Qwen3-8B" || (j.QualityNote != "") != (len(tc.note) > 0) {
				t.Errorf("JSON model %q, quality_note %q", j.Model, j.QualityNote)
			}
		})
	}
}
