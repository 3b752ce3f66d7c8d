package calibrate

import (
	"slices"
	"strings"
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

// A closed loop whose client draws its lengths sends each request a prompt
// and an output uniform in [min, 2 × mean − min] (by hand: mean 20, least
// 16 → 16…24; mean 4, least 2 → 2…6), the same ones for the same seed;
// with no least lengths every request is the mean. MaxLengths is the
// longest of each (24, 6), which a row's engine must admit.
func TestClosedLoopDrawsLengthsAboutTheMean(t *testing.T) {
	cfg := engine.Config{
		StepTimer:   engine.StepTimerFunc(func(*perfmodel.Batch) time.Duration { return time.Millisecond }),
		NumBlocks:   256,
		BlockSize:   16,
		MaxModelLen: 30,
	}
	w := ClosedLoop{Clients: 4, Requests: 200, Input: 20, Output: 4, InputMin: 16, OutputMin: 2, Seed: 7}
	if in, out := w.MaxLengths(); in != 24 || out != 6 {
		t.Errorf("MaxLengths %d, %d; want 24, 6", in, out)
	}
	lengths := func(w ClosedLoop) (ins, outs []int) {
		tls, err := RunClosedLoop(cfg, w)
		if err != nil {
			t.Fatal(err)
		}
		for _, tl := range tls {
			ins, outs = append(ins, tl.PromptTokens), append(outs, tl.OutputTokens)
		}
		return ins, outs
	}
	ins, outs := lengths(w)
	if lo, hi := slices.Min(ins), slices.Max(ins); lo != 16 || hi != 24 {
		t.Errorf("prompts in [%d, %d], want [16, 24] over 200 draws", lo, hi)
	}
	if lo, hi := slices.Min(outs), slices.Max(outs); lo != 2 || hi != 6 {
		t.Errorf("outputs in [%d, %d], want [2, 6] over 200 draws", lo, hi)
	}
	again, _ := lengths(w)
	if !slices.Equal(ins, again) {
		t.Error("the same seed drew other prompt lengths")
	}
	w.InputMin, w.OutputMin = 0, 0
	ins, outs = lengths(w)
	if slices.Min(ins) != 20 || slices.Max(ins) != 20 || slices.Min(outs) != 4 || slices.Max(outs) != 4 {
		t.Errorf("without least lengths: prompts %d…%d, outputs %d…%d; want 20 and 4", slices.Min(ins), slices.Max(ins), slices.Min(outs), slices.Max(outs))
	}
	w.InputMin = 21
	if _, err := RunClosedLoop(cfg, w); err == nil {
		t.Error("a least prompt above the mean was accepted")
	}
}

// recent.csv's optional input_min and output_min columns are read, and a
// least length above its mean is refused naming the row.
func TestParsePublicLeastLengths(t *testing.T) {
	head := "id,engine,engine_version,model,gpu,tp,dtype,kv_dtype,input,output,concurrency,client,requests,ttft_ms,ttft_p95_ms,ttft_median_ms,tpot_ms,e2e_ms,stat,source,input_min,output_min\n"
	rows, err := ParsePublic(strings.NewReader(head + "a,SGLang,0.5.7,DeepSeek-R1,H200,8,fp8,bf16,922,7373,4,c,40,1,,,1,1,mean,https://x,819,6554\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := rows[0]; r.InputMin != 819 || r.OutputMin != 6554 {
		t.Errorf("least lengths %d, %d; want 819, 6554", r.InputMin, r.OutputMin)
	}
	_, err = ParsePublic(strings.NewReader(head + "b,SGLang,0.5.7,DeepSeek-R1,H200,8,fp8,bf16,922,922,4,c,40,1,,,1,1,mean,https://x,923,\n"))
	if err == nil || !strings.Contains(err.Error(), "(b)") {
		t.Errorf("a least prompt above the mean: %v, want an error naming row b", err)
	}
}

// The optional recv_interval, chunked_prefill and batch_wait_* columns (a
// server's --scheduler-recv-interval, --chunked-prefill-size and
// TensorRT-LLM's batch waiting) reach the row and its engine; a negative
// one is refused naming the row.
func TestParsePublicRecvInterval(t *testing.T) {
	head := "id,engine,engine_version,model,gpu,tp,dtype,kv_dtype,input,output,concurrency,client,requests,ttft_ms,ttft_p95_ms,ttft_median_ms,tpot_ms,e2e_ms,stat,source,recv_interval,chunked_prefill,batch_wait_iters,batch_wait_tokens\n"
	rows, err := ParsePublic(strings.NewReader(head + "a,SGLang,0.5.12,DeepSeek-R1,B200,8,fp8,fp8,922,922,16,c,160,1,,,1,,mean,https://x,30,32768,40,6554\n"))
	if err != nil {
		t.Fatal(err)
	}
	if rows[0].RecvInterval != 30 {
		t.Errorf("recv interval %d, want 30", rows[0].RecvInterval)
	}
	cfg, err := EngineFor(rows[0], familyEffOrFail(t, rows[0]))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RecvInterval != 30 || cfg.MaxNumBatchedTokens != 32768 || cfg.BatchWaitIters != 40 || cfg.BatchWaitTokens != 6554 {
		t.Errorf("engine recv interval %d, step budget %d, batch wait %d steps / %d tokens; want 30, 32,768 (the family's B200 default is 16,384), 40 / 6,554",
			cfg.RecvInterval, cfg.MaxNumBatchedTokens, cfg.BatchWaitIters, cfg.BatchWaitTokens)
	}
	_, err = ParsePublic(strings.NewReader(head + "b,SGLang,0.5.12,DeepSeek-R1,B200,8,fp8,fp8,922,922,16,c,160,1,,,1,,mean,https://x,-1,,,\n"))
	if err == nil || !strings.Contains(err.Error(), "(b)") {
		t.Errorf("a negative recv interval: %v, want an error naming row b", err)
	}
}

// familyEffOrFail is FamilyEff, failing t on an error.
func familyEffOrFail(t *testing.T, p PublicRow) perfmodel.Efficiency {
	t.Helper()
	eff, err := FamilyEff(p)
	if err != nil {
		t.Fatal(err)
	}
	return eff
}

// ParsePublic never panics, and every row it returns has least lengths
// within [0, the mean].
func FuzzParsePublic(f *testing.F) {
	head := "id,engine,engine_version,model,gpu,tp,dtype,kv_dtype,input,output,concurrency,client,requests,ttft_ms,ttft_p95_ms,ttft_median_ms,tpot_ms,e2e_ms,stat,source,input_min,output_min\n"
	f.Add(head + "a,SGLang,0.5.7,DeepSeek-R1,H200,8,fp8,bf16,922,7373,4,c,40,1,,,1,1,mean,https://x,819,6554\n")
	f.Add(head + "b,vLLM,0.11,Qwen3-8B,H100-SXM,1,bf16,bf16,233,221,4,c,,64,,60,7,1680,mean,https://y,,\n")
	f.Add("id,engine\nx,y\n")
	f.Fuzz(func(t *testing.T, data string) {
		rows, err := ParsePublic(strings.NewReader(data))
		if err != nil {
			return
		}
		for _, r := range rows {
			if r.InputMin < 0 || r.InputMin > r.Input || r.OutputMin < 0 || r.OutputMin > r.Output {
				t.Fatalf("%s: least lengths %d, %d outside [0, %d], [0, %d]", r.ID, r.InputMin, r.OutputMin, r.Input, r.Output)
			}
		}
	})
}
