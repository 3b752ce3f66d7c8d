package engine_test

import (
	"fmt"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// A simulation in virtual time with a made-up step timer: 1 ms per step
// plus 10 µs per token computed. Two requests arrive 2 ms apart.
func ExampleSimulate() {
	cfg := engine.Config{
		StepTimer: engine.StepTimerFunc(func(b *perfmodel.Batch) time.Duration {
			n := 0
			for _, s := range b.Seqs {
				n += s.NewTokens
			}
			return time.Millisecond + time.Duration(n)*10*time.Microsecond
		}),
		NumBlocks:   128,
		MaxModelLen: 1024,
	}
	res, err := engine.Simulate(cfg, []engine.Arrival{
		{At: 0, Request: engine.Request{ID: "a", PromptLen: 100, MaxTokens: 4, IgnoreEOS: true}},
		{At: 2 * time.Millisecond, Request: engine.Request{ID: "b", PromptLen: 300, MaxTokens: 2, IgnoreEOS: true}},
	}, engine.SimOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for i, tl := range res.Timelines {
		fmt.Printf("%d: queue %v, prefill %v, decode %v, %d tokens (%s)\n", i, tl.Queue(), tl.Prefill(), tl.Decode(), tl.OutputTokens, tl.Finish)
	}
	// Step 1 (0–2 ms): a's prompt. Step 2 (2–6.01 ms): a's decode and b's
	// 300-token prompt, which b joins the moment it arrives. Step 3: both
	// decode (b is done); step 4: a alone.
	//
	// Output:
	// 0: queue 0s, prefill 2ms, decode 6.04ms, 4 tokens (length)
	// 1: queue 0s, prefill 4.01ms, decode 1.02ms, 2 tokens (length)
}
