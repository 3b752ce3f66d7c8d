package calibrate

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// TensorRT-LLM admits a request only with room for its prompt and all of
// its max_tokens in 64-token blocks: 1,600 tokens of cache hold five
// 300-token requests (each five blocks' 320 tokens), never more than
// max_batch_size, and at least one.
func TestNoEvictBound(t *testing.T) {
	for _, c := range []struct {
		name            string
		blocks, seqs    int
		tokens, want    int
		blockSizeTokens int
	}{
		{name: "capacity", blocks: 100, blockSizeTokens: 16, seqs: 256, tokens: 300, want: 5},
		{name: "whole blocks", blocks: 100, blockSizeTokens: 16, seqs: 256, tokens: 320, want: 5},
		{name: "one block more", blocks: 100, blockSizeTokens: 16, seqs: 256, tokens: 321, want: 4},
		{name: "max_batch_size", blocks: 100, blockSizeTokens: 16, seqs: 3, tokens: 300, want: 3},
		{name: "no bound given", blocks: 100, blockSizeTokens: 16, tokens: 300, want: 5},
		{name: "at least one", blocks: 10, blockSizeTokens: 16, seqs: 256, tokens: 300, want: 1},
	} {
		cfg := engine.Config{NumBlocks: c.blocks, BlockSize: c.blockSizeTokens, MaxNumSeqs: c.seqs}
		if got := noEvictBound(cfg, c.tokens); got != c.want {
			t.Errorf("%s: %d requests, want %d", c.name, got, c.want)
		}
	}
}

// EngineFor bounds a TensorRT-LLM row's running requests by that
// admission and leaves a vLLM row's scheduler alone (it preempts).
func TestEngineForBoundsTensorRTLLMAdmission(t *testing.T) {
	row := PublicRow{ID: "r", Engine: "NIM (TensorRT-LLM)", Model: "Llama-3-70B", GPU: "H100-SXM", TP: 4, DType: "fp16", KVDType: "fp16",
		Input: 2000, Output: 2000, Concurrency: 200}
	eff, cfg := engineForDefaults(t, row)
	if want := cfg.NumBlocks * cfg.BlockSize / 4032; cfg.MaxNumSeqs != want || want >= 200 {
		t.Errorf("TensorRT-LLM row: max_num_seqs %d, want %d (the cache's tokens ÷ 4,032) and fewer than the 200 clients", cfg.MaxNumSeqs, want)
	}
	row.Engine = "vLLM"
	cfg, err := EngineFor(row, eff)
	if err != nil {
		t.Fatal(err)
	}
	fam, _ := engine.FamilyOf(row.Engine)
	g, err := perfmodel.LookupGPU(row.GPU)
	if err != nil {
		t.Fatal(err)
	}
	if _, want := fam.BatchLimits(g.MemoryBytes); cfg.MaxNumSeqs != want {
		t.Errorf("vLLM row: max_num_seqs %d, want its family's %d", cfg.MaxNumSeqs, want)
	}
}

// The closed loop's intake is paid one request at a time before the engine
// sees a request and counts in the client's TTFT and E2E: with 1 ms steps
// and a 3 ms intake, two requests sent at once reach the engine at 3 and
// 6 ms; the first is prefilled in 3–4 ms and decoded in 4–5 ms, the second
// in 6–7 and 7–8 ms.
func TestClosedLoopIntakeCountsInTTFT(t *testing.T) {
	cfg := engine.Config{
		StepTimer:   engine.StepTimerFunc(func(*perfmodel.Batch) time.Duration { return time.Millisecond }),
		NumBlocks:   64,
		BlockSize:   16,
		MaxModelLen: 64,
	}
	tls, err := RunClosedLoop(cfg, ClosedLoop{Clients: 2, Requests: 2, Input: 10, Output: 2, Intake: 3 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	type got struct{ TTFT, E2E time.Duration }
	var gs []got
	for _, tl := range tls {
		gs = append(gs, got{tl.FirstToken.Sub(tl.Arrival), tl.Finished.Sub(tl.Arrival)})
	}
	want := []got{{4 * time.Millisecond, 5 * time.Millisecond}, {7 * time.Millisecond, 8 * time.Millisecond}}
	if d := cmp.Diff(want, gs); d != "" {
		t.Errorf("TTFT and E2E from the send (-want +got):\n%s", d)
	}
}

// A TensorRT-LLM row's steps hold its engines' max_num_tokens (32,768, so
// sixteen 2,000-token prompts), or a whole prompt and its output where
// that is longer (chunked context is off); a vLLM row keeps its family's
// budget (none: the engine's defaults for the GPU).
func TestEngineForTensorRTLLMTokensPerStep(t *testing.T) {
	g, err := perfmodel.LookupGPU("H100-SXM")
	if err != nil {
		t.Fatal(err)
	}
	vllm, ok := engine.FamilyOf("vLLM")
	if !ok {
		t.Fatal("no vLLM family")
	}
	vllmBudget, _ := vllm.BatchLimits(g.MemoryBytes)
	for _, c := range []struct {
		engine        string
		input, output int
		want          int
	}{
		{"NIM (TensorRT-LLM)", 2000, 200, 32768},
		{"NIM (TensorRT-LLM)", 30000, 5000, 35000},
		{"vLLM", 2000, 200, vllmBudget},
	} {
		row := PublicRow{ID: "r", Engine: c.engine, Model: "Llama-3-8B", GPU: g.Name, TP: 1, DType: "fp16", KVDType: "fp16",
			Input: c.input, Output: c.output, Concurrency: 100}
		_, cfg := engineForDefaults(t, row)
		if cfg.MaxNumBatchedTokens != c.want {
			t.Errorf("%s, %d → %d tokens: %d tokens per step, want %d", c.engine, c.input, c.output, cfg.MaxNumBatchedTokens, c.want)
		}
	}
}

// engineForDefaults is EngineFor on the row's default efficiencies,
// returned with them.
func engineForDefaults(t *testing.T, row PublicRow) (perfmodel.Efficiency, engine.Config) {
	t.Helper()
	eff, err := defaultEff(row)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := EngineFor(row, eff)
	if err != nil {
		t.Fatal(err)
	}
	return eff, cfg
}
