package calibrate

import (
	"slices"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/results"
)

// A request with shared blocks is replayed with its tokens: two prompts
// whose blocks begin alike begin with the same BlockTokens × that many
// tokens and differ after; a request without blocks keeps its length only
// (never prefix-cached), as before.
func TestRequestPromptsShareTheirBlocks(t *testing.T) {
	a := request(0, results.Observed{Input: 20, Output: 3, Blocks: []int64{1, 2, 3}, BlockTokens: 4})
	b := request(1, results.Observed{Input: 22, Output: 3, Blocks: []int64{1, 2, 9}, BlockTokens: 4})
	c := request(2, results.Observed{Input: 20, Output: 3})
	if len(a.Prompt) != 20 || len(b.Prompt) != 22 || c.Prompt != nil || c.PromptLen != 20 {
		t.Fatalf("prompt lengths %d, %d, %v (%d): want 20, 22, nil (20)", len(a.Prompt), len(b.Prompt), c.Prompt, c.PromptLen)
	}
	common := 0
	for common < 20 && a.Prompt[common] == b.Prompt[common] {
		common++
	}
	if common != 8 { // blocks 1 and 2, 4 tokens each
		t.Errorf("the prompts share their first %d tokens, want 8", common)
	}
	if slices.Equal(a.Prompt[12:20], b.Prompt[12:20]) {
		t.Error("the requests' own tokens are alike")
	}
}

// With prefix caching on, the engine replaying requests that share blocks
// serves the shared blocks of all but the first from its cache.
func TestReplayHitsTheSharedBlocks(t *testing.T) {
	cfg, _, err := engine.DefaultOptions().Config()
	if err != nil {
		t.Fatal(err)
	}
	cfg.EnablePrefixCaching = true
	var obs []results.Observed
	for i := range 4 {
		obs = append(obs, results.Observed{Arrival: time.Duration(i) * time.Second, Input: 256, Output: 2, Blocks: []int64{1, 2, 3, int64(10 + i)}, BlockTokens: 64})
	}
	arr := make([]engine.Arrival, len(obs))
	for i, o := range obs {
		arr[i] = engine.Arrival{At: o.Arrival, Request: request(i, o)}
	}
	res, err := engine.Simulate(cfg, arr, engine.SimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, tl := range res.Timelines {
		want := 192 // 3 shared blocks of 64 tokens
		if i == 0 {
			want = 0
		}
		if tl.CachedTokens != want {
			t.Errorf("request %d: %d cached tokens, want %d", i, tl.CachedTokens, want)
		}
	}
}
