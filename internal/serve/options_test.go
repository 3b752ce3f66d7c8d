package serve

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/workload"
)

func TestDefaultOptionsRun(t *testing.T) {
	cfg, err := DefaultOptions().Config()
	if err != nil {
		t.Fatal(err)
	}
	e := cfg.Engine.WithDefaults()
	if e.NumBlocks < 1000 || e.MaxModelLen != 131072 || e.MaxNumBatchedTokens != 8192 || e.MaxNumSeqs != 1024 {
		t.Errorf("engine config %+v", e)
	}
	if l := cfg.Limits; l.ReadHeaderTimeout != 10*time.Second || l.BodyTimeout != 30*time.Second || l.IdleTimeout != 2*time.Minute || l.MaxConns != 0 {
		t.Errorf("limits %+v", l)
	}
	if e.OutputLength != (workload.LogNormal{MeanLen: 256, Sigma: 1}) {
		t.Errorf("natural output length %v", e.OutputLength)
	}
}

// TestDefaultMaxModelLen: with no max_model_len the context is the
// model's own (Llama-3.1: 131,072, as vLLM serves it), lowered to the KV
// cache's capacity; an 8,192-in / 1,024-out request, which an 8,192 default
// rejected, is served.
func TestDefaultMaxModelLen(t *testing.T) {
	for _, tc := range []struct {
		model, gpu string
		want       func(kvTokens int) int
	}{
		{"Llama-3.1-8B", "H100-SXM", func(int) int { return 131072 }},
		{"Llama-3.1-8B", "L4", func(kv int) int { return kv }},    // 24 GB: the KV cache holds less than 131,072
		{"Llama-2-7B", "H100-SXM", func(int) int { return 4096 }}, // its config.json's max_position_embeddings
	} {
		o := DefaultOptions()
		o.Engine.Model, o.Engine.GPU = tc.model, tc.gpu
		cfg, err := o.Config()
		if err != nil {
			t.Fatalf("%s on %s: %v", tc.model, tc.gpu, err)
		}
		e := cfg.Engine.WithDefaults()
		kv := e.NumBlocks * e.BlockSize
		if want := tc.want(kv); e.MaxModelLen != want {
			t.Errorf("%s on %s: max_model_len %d, want %d (KV cache %d tokens)", tc.model, tc.gpu, e.MaxModelLen, want, kv)
		}
	}
	cfg, err := DefaultOptions().Config()
	if err != nil {
		t.Fatal(err)
	}
	res, err := engine.Simulate(cfg.Engine, []engine.Arrival{{Request: engine.Request{ID: "long", PromptLen: 8192, MaxTokens: 1024, IgnoreEOS: true}}}, engine.SimOptions{})
	if err != nil {
		t.Fatalf("8,192-in / 1,024-out on Llama-3.1-8B: %v", err)
	}
	if tl := res.Timelines[0]; tl.OutputTokens != 1024 {
		t.Errorf("served %d output tokens, want 1024", tl.OutputTokens)
	}
}

// A bad setting is reported under its field's name, so the command line
// can say which flag to fix.
func TestOptionsThatCannotRun(t *testing.T) {
	tests := []struct {
		mutate func(*Options)
		field  string // "" when no single setting is at fault
		want   string
	}{
		{func(o *Options) { o.Engine.BlockSize = 0 }, "block_size", "at least 1"},
		{func(o *Options) { o.Engine.Model, o.Engine.GPU = "Llama-3.1-405B", "L4" }, "", "does not fit"},
		{func(o *Options) { o.Engine.MaxNumBatchedTokens = 4 }, "max_num_batched_tokens", "below one block"},
		{func(o *Options) { o.Engine.GPUMemoryUtilization = 1.5 }, "gpu_memory_utilization", "(0, 1]"},
		{func(o *Options) { o.Engine.TensorParallelSize = -1 }, "tensor_parallel_size", "0 for the smallest"},
		{func(o *Options) { o.Engine.DType = "fp3" }, "dtype", "fp3"},
		{func(o *Options) { o.Engine.Model = "no-such-model" }, "model", "no-such-model"},
		{func(o *Options) { o.QueueFullStatus = 418 }, "queue_full_status", "429 or 503"},
		{func(o *Options) { o.Engine.NaturalOutputTokens = "zipf:1" }, "natural_output_tokens", "distribution"},
		{func(o *Options) { o.Faults.StallRate = 2 }, "fault_stall_rate", "[0, 1]"},
		{func(o *Options) { o.Faults.Rate429 = -0.1 }, "fault_429_rate", "[0, 1]"},
		{func(o *Options) { o.BodyTimeout = -time.Second }, "body_timeout", "negative"},
		{func(o *Options) { o.MaxConnections = -1 }, "max_connections", "negative"},
		{func(o *Options) { o.Engine.NumGPUBlocksOverride, o.Engine.MaxModelLen = 10, 4096 }, "max_model_len", "KV cache holds"},
	}
	for _, tt := range tests {
		o := DefaultOptions()
		tt.mutate(&o)
		_, err := o.Config()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v, want an error about %q", err, tt.want)
			continue
		}
		var fe *field.Error
		if tt.field != "" && (!errors.As(err, &fe) || fe.Field != tt.field) {
			t.Errorf("%v: want a field error about %s", err, tt.field)
		}
	}
}

// Tensor parallel size 0 picks the smallest that fits: Llama-3.1-70B in
// bf16 needs two H100s.
func TestTensorParallelZeroFits(t *testing.T) {
	o := DefaultOptions()
	o.Engine.Model, o.Engine.TensorParallelSize = "Llama-3.1-70B", 0
	cfg, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cfg.Engine.GPU, "2 x ") {
		t.Errorf("GPU %q, want 2 x H100-SXM", cfg.Engine.GPU)
	}
}
