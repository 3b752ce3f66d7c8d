package serve

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"github.com/tokentrace/tokentrace/internal/engine"
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
		t.Errorf("server limits %+v, want 10s, 30s, 2m and the cap from the descriptor limit", l)
	}
}

// TestDefaultMaxModelLen: with no --max-model-len the context is the
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
		o.Model, o.GPU = tc.model, tc.gpu
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

// TestConfigFileKeysAreFlags sets every flag from a YAML file and checks
// the options equal those set from the command line.
func TestConfigFileKeysAreFlags(t *testing.T) {
	values := map[string]string{
		"model": "Qwen2.5-7B", "gpu": "A100-80GB-SXM", "tp": "2", "dtype": "fp8", "kv-dtype": "fp8",
		"gpu-memory-utilization": "0.8", "max-num-seqs": "64", "max-num-batched-tokens": "4096", "block-size": "32",
		"num-gpu-blocks-override": "900", "max-model-len": "4096", "max-waiting": "10", "queue-full-status": "503",
		"enable-prefix-caching": "true", "enable-chunked-prefill": "false", "speculative-k": "3", "speculative-alpha": "0.7",
		"draft-model": "Llama-3.1-8B", "scheduling-policy": "priority", "output-dist": "uniform", "output-mean": "5",
		"output-sigma": "0.5", "output-min": "3", "output-max": "9", "seed": "11", "host": "0.0.0.0", "port": "9000",
		"served-model-name": "m", "max-body-bytes": "4096", "fault-seed": "5", "fault-429-rate": "0.1",
		"fault-500-rate": "0.05", "fault-503-rate": "0.02", "fault-400-rate": "0.01", "fault-slow-first-token-rate": "0.2",
		"fault-slow-first-token-delay": "3s", "fault-stall-rate": "0.3", "fault-stall-duration": "250ms",
		"fault-reset-rate": "0.04", "gpu-file": "gpus.yaml", "read-header-timeout": "3s", "body-timeout": "7s",
		"idle-timeout": "1m", "max-connections": "100",
	}
	fromFlags, fromFile := DefaultOptions(), DefaultOptions()
	fsFlags := pflag.NewFlagSet("a", pflag.ContinueOnError)
	fromFlags.BindFlags(fsFlags)
	fsFile := pflag.NewFlagSet("b", pflag.ContinueOnError)
	fromFile.BindFlags(fsFile)
	var yaml strings.Builder
	fsFlags.VisitAll(func(f *pflag.Flag) {
		v, ok := values[f.Name]
		if !ok {
			t.Errorf("flag --%s has no test value", f.Name)
			return
		}
		if err := fsFlags.Set(f.Name, v); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&yaml, "%s: %q\n", strings.ReplaceAll(f.Name, "-", "_"), v)
	})
	path := filepath.Join(t.TempDir(), "serve.yaml")
	if err := os.WriteFile(path, []byte(yaml.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ApplyConfigFile(path, fsFile); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(fromFlags, fromFile); diff != "" {
		t.Errorf("file and flags differ (-flags +file):\n%s", diff)
	}
	if fromFile.Faults.StallDuration != 250*time.Millisecond || !fromFile.EnablePrefixCaching || fromFile.EnableChunkedPrefill ||
		fromFile.BodyTimeout != 7*time.Second || fromFile.MaxConnections != 100 {
		t.Errorf("options %+v", fromFile)
	}
}

func TestCommandLineWinsOverFile(t *testing.T) {
	o := DefaultOptions()
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	o.BindFlags(fs)
	if err := fs.Parse([]string{"--max-num-seqs", "7"}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("max-num-seqs: 99\nseed: 3\nfault-429-rate: 0.5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ApplyConfigFile(path, fs); err != nil {
		t.Fatal(err)
	}
	if o.MaxNumSeqs != 7 || o.Seed != 3 || o.Faults.Rate429 != 0.5 {
		t.Errorf("max-num-seqs %d seed %d rate %g", o.MaxNumSeqs, o.Seed, o.Faults.Rate429)
	}
}

func TestOptionsThatCannotRun(t *testing.T) {
	tests := []struct {
		mutate func(*Options)
		want   string
	}{
		{func(o *Options) { o.BlockSize = 0 }, "block-size"},
		{func(o *Options) { o.Model, o.GPU = "Llama-3.1-405B", "L4" }, "does not fit"},
		{func(o *Options) { o.MaxNumBatchedTokens = 4 }, "below one block"},
		{func(o *Options) { o.GPUMemoryUtilization = 1.5 }, "gpu-memory-utilization"},
		{func(o *Options) { o.DType = "fp3" }, "dtype"},
		{func(o *Options) { o.QueueFullStatus = 418 }, "429 or 503"},
		{func(o *Options) { o.OutputLength.Dist = "zipf" }, "distribution"},
		{func(o *Options) { o.Faults.StallRate = 2 }, "--fault-stall-rate"},
		{func(o *Options) { o.Faults.Rate429 = -0.1 }, "--fault-429-rate"},
		{func(o *Options) { o.NumGPUBlocksOverride, o.MaxModelLen = 10, 4096 }, "KV cache holds"},
		{func(o *Options) { o.BodyTimeout = -time.Second }, "--body-timeout"},
		{func(o *Options) { o.MaxConnections = -1 }, "--max-connections"},
	}
	for _, tt := range tests {
		o := DefaultOptions()
		tt.mutate(&o)
		if _, err := o.Config(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v, want an error about %q", err, tt.want)
		}
	}
}
