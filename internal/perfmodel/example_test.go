package perfmodel_test

import (
	"fmt"

	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// Time one engine step: a 512-token prefill chunk beside three decodes.
func ExampleEstimator_StepTime() {
	model, _ := perfmodel.LookupModel("Llama-3.1-8B")
	gpu, _ := perfmodel.LookupGPU("H100-SXM")
	est, err := perfmodel.New(perfmodel.Config{Model: model, GPU: gpu})
	if err != nil {
		fmt.Println(err)
		return
	}
	var b perfmodel.Batch
	b.Add(512, 0)
	for range 3 {
		b.Add(1, 2000)
	}
	fmt.Println("KV bytes per token:", est.KVBytesPerToken())
	fmt.Println("step:", est.StepTime(&b).Round(100_000), est.Breakdown(&b).Bound+"-bound")
	// Output:
	// KV bytes per token: 131072
	// step: 15.8ms compute-bound
}
