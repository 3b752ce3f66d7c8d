package perfmodel

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// Every catalog model on every catalog GPU, in several precisions, with and
// without speculation: either a clear no-fit error or finite output in all
// three formats — never a NaN, an Inf or a panic.
func TestPlanWholeCatalog(t *testing.T) {
	var gpus []string
	for _, g := range BuiltinGPUs().GPUs() {
		gpus = append(gpus, g.Name)
	}
	for _, model := range ModelNames() {
		for _, gpu := range gpus {
			for _, dt := range []string{"bf16", "fp8", "int4"} {
				req := Request{Model: model, GPU: gpu, WeightDType: dt, KVDType: "fp8", Input: 700, Output: 300, Batches: []int{1, 64}}
				if dt == "fp8" {
					req.SpecK, req.Alpha = 3, 0.6
				}
				res, err := Plan(req)
				if err != nil {
					var nf *NoFitError
					if !errors.As(err, &nf) {
						t.Errorf("%s on %s %s: %v", model, gpu, dt, err)
					}
					continue
				}
				var buf bytes.Buffer
				for _, write := range []func() error{
					func() error { return res.WriteText(&buf) },
					func() error { return res.WriteExplain(&buf) },
					func() error { return res.WriteJSON(&buf) },
				} {
					if err := write(); err != nil {
						t.Fatal(err)
					}
				}
				out := buf.String()
				if strings.Contains(out, "NaN") || strings.Contains(out, "Inf") {
					t.Errorf("%s on %s %s: NaN/Inf in output:\n%s", model, gpu, dt, out)
				}
				for _, r := range res.Rows {
					if r.TTFT <= 0 || r.TPOT <= 0 || r.E2E <= 0 {
						t.Errorf("%s on %s %s: non-positive times %+v", model, gpu, dt, r)
					}
				}
			}
		}
	}
}

func TestPlanAutoTP(t *testing.T) {
	res, err := Plan(Request{Model: "Llama-3.1-405B", GPU: "H100-SXM", WeightDType: "fp8", Input: 100, Output: 10, Batches: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	// 405.9 B params ≈ 406 GB in FP8 (+ 16-bit embeddings): TP 8 gives
	// ~52 GB per GPU, TP 4 ~104 GB > 80.
	if c := res.Est.Config(); c.TP != 8 || !res.TPAuto {
		t.Errorf("auto TP = %d", c.TP)
	}
}

func time25us(layers int) time.Duration { return time.Duration(layers) * 25 * time.Microsecond }
