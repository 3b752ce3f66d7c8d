package serve

import (
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/spf13/pflag"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/httplimit"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// Options are `tokentrace serve`'s settings as a user gives them: flags,
// or the keys of a YAML file with the same names (docs/serve.md). Config
// turns them into a runnable Config.
type Options struct {
	Model, GPU, GPUFile, DType, KVDType, DraftModel string
	TP                                              int
	GPUMemoryUtilization                            float64
	MaxNumSeqs, MaxNumBatchedTokens, BlockSize      int
	NumGPUBlocksOverride, MaxModelLen, MaxWaiting   int
	EnablePrefixCaching, EnableChunkedPrefill       bool
	SpeculativeK                                    int
	SpeculativeAlpha                                float64
	SchedulingPolicy                                string
	OutputLength                                    engine.OutputLength
	Seed                                            uint64
	Host                                            string
	Port                                            int
	ServedModelName                                 string
	MaxBodyBytes                                    int64
	QueueFullStatus                                 int
	Faults                                          Faults
	// The HTTP server's deadlines and connection cap (httplimit.Limits).
	ReadHeaderTimeout, BodyTimeout, IdleTimeout time.Duration
	MaxConnections                              int
}

// DefaultMaxModelLen is the context length used when --max-model-len is
// not given and the model's own context length (config.json's
// max_position_embeddings) is unknown; either is lowered to the KV cache's
// capacity when that is smaller.
const DefaultMaxModelLen = 8192

// DefaultOptions are the defaults of `tokentrace serve`.
func DefaultOptions() Options {
	return Options{
		Model: "Llama-3.1-8B", GPU: "H100-SXM", TP: 1, DType: "bf16", KVDType: "auto",
		GPUMemoryUtilization: perfmodel.DefaultMemUtil, BlockSize: 16, EnableChunkedPrefill: true,
		SchedulingPolicy: engine.PolicyFCFS, OutputLength: engine.DefaultOutputLength,
		Host: "127.0.0.1", Port: 8000, MaxBodyBytes: DefaultMaxBodyBytes, QueueFullStatus: 429,
		Faults:            Faults{SlowFirstTokenDelay: DefaultSlowFirstTokenDelay, StallDuration: DefaultStallDuration},
		ReadHeaderTimeout: httplimit.DefaultReadHeaderTimeout, BodyTimeout: httplimit.DefaultBodyTimeout,
		IdleTimeout: httplimit.DefaultIdleTimeout,
	}
}

// BindFlags defines one flag per option on fs, with o's values as the
// defaults. The flag names are also the YAML keys of ApplyConfigFile.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Model, "model", o.Model, "model: a catalog name (tokentrace estimate --list) or a Hugging Face config.json (file or directory)")
	fs.StringVar(&o.GPU, "gpu", o.GPU, "GPU: a catalog name (tokentrace estimate --list)")
	fs.StringVar(&o.GPUFile, "gpu-file", o.GPUFile, "YAML hardware catalog that adds to or overrides the built-in one (as tokentrace estimate --gpu-file)")
	fs.IntVar(&o.TP, "tp", o.TP, "tensor-parallel degree (GPUs per replica)")
	fs.StringVar(&o.DType, "dtype", o.DType, "weight precision: bf16, fp16, fp8, int8, int4")
	fs.StringVar(&o.KVDType, "kv-dtype", o.KVDType, "KV cache precision: auto (bf16), bf16, fp16, fp8, int8")
	fs.Float64Var(&o.GPUMemoryUtilization, "gpu-memory-utilization", o.GPUMemoryUtilization, "fraction of GPU memory for weights and KV cache")
	fs.IntVar(&o.MaxNumSeqs, "max-num-seqs", o.MaxNumSeqs, "most running requests per step (0: vLLM's default for the GPU)")
	fs.IntVar(&o.MaxNumBatchedTokens, "max-num-batched-tokens", o.MaxNumBatchedTokens, "token budget per step (0: vLLM's default for the GPU)")
	fs.IntVar(&o.BlockSize, "block-size", o.BlockSize, "KV cache block size in tokens")
	fs.IntVar(&o.NumGPUBlocksOverride, "num-gpu-blocks-override", o.NumGPUBlocksOverride, "KV cache blocks, instead of what fits in GPU memory (0: derived)")
	fs.IntVar(&o.MaxModelLen, "max-model-len", o.MaxModelLen, fmt.Sprintf("longest prompt + output (0: the model's context length, or %d when unknown; less if the KV cache holds less)", DefaultMaxModelLen))
	fs.IntVar(&o.MaxWaiting, "max-waiting", o.MaxWaiting, "bound on the waiting queue; requests beyond it get --queue-full-status (0: unbounded)")
	fs.IntVar(&o.QueueFullStatus, "queue-full-status", o.QueueFullStatus, "status when the waiting queue is full: 429 or 503")
	fs.BoolVar(&o.EnablePrefixCaching, "enable-prefix-caching", o.EnablePrefixCaching, "reuse KV blocks of shared prompt prefixes")
	fs.BoolVar(&o.EnableChunkedPrefill, "enable-chunked-prefill", o.EnableChunkedPrefill, "split long prompts across steps (=false: whole prompts only)")
	fs.IntVar(&o.SpeculativeK, "speculative-k", o.SpeculativeK, "speculative decoding draft length (0: off)")
	fs.Float64Var(&o.SpeculativeAlpha, "speculative-alpha", o.SpeculativeAlpha, "speculative decoding per-token acceptance rate")
	fs.StringVar(&o.DraftModel, "draft-model", o.DraftModel, "draft model whose cost is added to speculative steps (catalog name or config.json)")
	fs.StringVar(&o.SchedulingPolicy, "scheduling-policy", o.SchedulingPolicy, "fcfs or priority (requests' \"priority\" field, lower first)")
	fs.StringVar(&o.OutputLength.Dist, "output-dist", o.OutputLength.Dist, "natural output length distribution: lognormal, exponential, uniform, fixed, max")
	fs.Float64Var(&o.OutputLength.Mean, "output-mean", o.OutputLength.Mean, "output length mean (lognormal, exponential, fixed)")
	fs.Float64Var(&o.OutputLength.Sigma, "output-sigma", o.OutputLength.Sigma, "lognormal output length shape")
	fs.IntVar(&o.OutputLength.Min, "output-min", o.OutputLength.Min, "uniform output length minimum")
	fs.IntVar(&o.OutputLength.Max, "output-max", o.OutputLength.Max, "uniform output length maximum")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "seed of the engine's random draws (output lengths, speculative acceptance)")
	fs.StringVar(&o.Host, "host", o.Host, "address to listen on")
	fs.IntVar(&o.Port, "port", o.Port, "port to listen on (0: any free port)")
	fs.StringVar(&o.ServedModelName, "served-model-name", o.ServedModelName, "model name clients send (default: the model's name)")
	fs.Int64Var(&o.MaxBodyBytes, "max-body-bytes", o.MaxBodyBytes, "largest request body accepted")
	fs.DurationVar(&o.ReadHeaderTimeout, "read-header-timeout", o.ReadHeaderTimeout, "deadline for a request's headers, from the connection's accept or its previous answer")
	fs.DurationVar(&o.BodyTimeout, "body-timeout", o.BodyTimeout, "deadline for a request's body, from the end of its headers (408 after it)")
	fs.DurationVar(&o.IdleTimeout, "idle-timeout", o.IdleTimeout, "how long a keep-alive connection may wait for its next request")
	fs.IntVar(&o.MaxConnections, "max-connections", o.MaxConnections, "most client connections open at once; more wait to be accepted (0: from the descriptor limit)")
	f := &o.Faults
	fs.Uint64Var(&f.Seed, "fault-seed", f.Seed, "seed of fault injection draws")
	fs.Float64Var(&f.Rate429, "fault-429-rate", f.Rate429, "fraction of requests answered 429")
	fs.Float64Var(&f.Rate500, "fault-500-rate", f.Rate500, "fraction of requests answered 500")
	fs.Float64Var(&f.Rate503, "fault-503-rate", f.Rate503, "fraction of requests answered 503")
	fs.Float64Var(&f.RateContextLength, "fault-400-rate", f.RateContextLength, "fraction of requests answered 400 (context length exceeded)")
	fs.Float64Var(&f.SlowFirstTokenRate, "fault-slow-first-token-rate", f.SlowFirstTokenRate, "fraction of requests whose first token is delayed")
	fs.DurationVar(&f.SlowFirstTokenDelay, "fault-slow-first-token-delay", f.SlowFirstTokenDelay, "delay of a slow first token")
	fs.Float64Var(&f.StallRate, "fault-stall-rate", f.StallRate, "fraction of requests that stall once mid-stream")
	fs.DurationVar(&f.StallDuration, "fault-stall-duration", f.StallDuration, "length of a mid-stream stall")
	fs.Float64Var(&f.ResetRate, "fault-reset-rate", f.ResetRate, "fraction of requests whose connection is reset mid-stream")
}

// ApplyConfigFile reads a YAML file of flag-named keys (underscores may
// stand for dashes) and sets every flag of fs the command line did not set.
// An unknown key, a nested value or a value the flag rejects is an error.
func ApplyConfigFile(path string, fs *pflag.FlagSet) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var kv map[string]any
	if err := yaml.Unmarshal(data, &kv); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		name := strings.ReplaceAll(k, "_", "-")
		f := fs.Lookup(name)
		if f == nil || name == "config" {
			return fmt.Errorf("config file %s: unknown key %q", path, k)
		}
		if f.Changed {
			continue // the command line wins
		}
		var v string
		switch x := kv[k].(type) {
		case map[string]any, []any:
			return fmt.Errorf("config file %s: key %q must be a single value", path, k)
		case nil:
			return fmt.Errorf("config file %s: key %q has no value", path, k)
		case string:
			v = x
		case float64:
			v = strconv.FormatFloat(x, 'g', -1, 64)
		default:
			v = fmt.Sprint(x)
		}
		if err := fs.Set(name, v); err != nil {
			return fmt.Errorf("config file %s: %s: %w", path, k, err)
		}
	}
	return nil
}

// Addr is the listen address, host:port.
func (o Options) Addr() string { return net.JoinHostPort(o.Host, strconv.Itoa(o.Port)) }

// Config resolves the model and GPU, sizes the KV cache with the
// performance model and returns the server configuration, or the reason it
// cannot run.
func (o Options) Config() (Config, error) {
	switch {
	case o.BlockSize < 1:
		return Config{}, fmt.Errorf("--block-size must be at least 1 (got %d)", o.BlockSize)
	case o.TP < 1:
		return Config{}, fmt.Errorf("--tp must be at least 1 (got %d)", o.TP)
	case !(o.GPUMemoryUtilization > 0 && o.GPUMemoryUtilization <= 1):
		return Config{}, fmt.Errorf("--gpu-memory-utilization must be in (0, 1] (got %g)", o.GPUMemoryUtilization)
	case o.MaxModelLen < 0 || o.NumGPUBlocksOverride < 0 || o.MaxNumSeqs < 0 || o.MaxNumBatchedTokens < 0:
		return Config{}, fmt.Errorf("--max-model-len, --num-gpu-blocks-override, --max-num-seqs and --max-num-batched-tokens must not be negative")
	case o.Port < 0 || o.Port > 65535:
		return Config{}, fmt.Errorf("--port %d is not a port", o.Port)
	case o.ReadHeaderTimeout < 0 || o.BodyTimeout < 0 || o.IdleTimeout < 0:
		return Config{}, fmt.Errorf("--read-header-timeout, --body-timeout and --idle-timeout must not be negative")
	case o.MaxConnections < 0:
		return Config{}, fmt.Errorf("--max-connections must not be negative (got %d)", o.MaxConnections)
	}
	model, err := perfmodel.ResolveModel(o.Model)
	if err != nil {
		return Config{}, fmt.Errorf("--model: %w", err)
	}
	gpu, err := o.lookupGPU()
	if err != nil {
		return Config{}, fmt.Errorf("--gpu: %w", err)
	}
	pc := perfmodel.Config{Model: model, GPU: gpu, TP: o.TP, MemUtil: o.GPUMemoryUtilization}
	if pc.WeightDType, err = parseDType(o.DType); err != nil {
		return Config{}, fmt.Errorf("--dtype: %w", err)
	}
	if pc.KVDType, err = parseDType(o.KVDType); err != nil {
		return Config{}, fmt.Errorf("--kv-dtype: %w", err)
	}
	if o.DraftModel != "" {
		d, err := perfmodel.ResolveModel(o.DraftModel)
		if err != nil {
			return Config{}, fmt.Errorf("--draft-model: %w", err)
		}
		pc.DraftModel = &d
	}
	est, err := perfmodel.New(pc)
	if err != nil {
		return Config{}, err
	}
	ec := engine.Config{
		BlockSize: o.BlockSize, NumBlocks: o.NumGPUBlocksOverride, MaxModelLen: o.MaxModelLen,
		MaxNumSeqs: o.MaxNumSeqs, MaxNumBatchedTokens: o.MaxNumBatchedTokens,
		DisableChunkedPrefill: !o.EnableChunkedPrefill, EnablePrefixCaching: o.EnablePrefixCaching,
		Speculative: engine.Speculative{K: o.SpeculativeK, Alpha: o.SpeculativeAlpha},
		Policy:      o.SchedulingPolicy, OutputLength: o.OutputLength, MaxWaiting: o.MaxWaiting, Seed: o.Seed,
	}
	ec = engine.FromEstimator(ec, est)
	if ec.NumBlocks < 1 {
		return Config{}, fmt.Errorf("%s on %d × %s leaves no memory for the KV cache at --gpu-memory-utilization %g; raise it, add GPUs (--tp) or use a smaller --dtype",
			model.Name, o.TP, gpu.Name, o.GPUMemoryUtilization)
	}
	if ec.MaxModelLen == 0 {
		ec.MaxModelLen = DefaultModelLen(model, ec.NumBlocks*ec.BlockSize-ec.Speculative.K)
	}
	kv := o.KVDType
	if kv == "" {
		kv = "auto"
	}
	cfg := Config{
		Engine: ec, ServedModelName: o.ServedModelName, MaxBodyBytes: o.MaxBodyBytes,
		QueueFullStatus: o.QueueFullStatus, Faults: o.Faults, CacheDType: kv, GPUMemoryUtilization: o.GPUMemoryUtilization,
		Limits: httplimit.Limits{ReadHeaderTimeout: o.ReadHeaderTimeout, BodyTimeout: o.BodyTimeout,
			IdleTimeout: o.IdleTimeout, MaxConns: o.MaxConnections},
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// DefaultModelLen is vLLM's default max_model_len: the model's context
// length (DefaultMaxModelLen when the catalog or config.json does not give
// one), lowered to kvTokens, what the KV cache holds.
func DefaultModelLen(m perfmodel.ModelSpec, kvTokens int) int {
	n := m.MaxContext
	if n <= 0 {
		n = DefaultMaxModelLen
	}
	return min(n, kvTokens)
}

func (o Options) lookupGPU() (perfmodel.GPU, error) {
	if o.GPUFile == "" {
		return perfmodel.LookupGPU(o.GPU)
	}
	extra, err := perfmodel.LoadGPUCatalogFile(o.GPUFile)
	if err != nil {
		return perfmodel.GPU{}, err
	}
	if g, err := extra.Lookup(o.GPU); err == nil {
		return g, nil
	}
	return perfmodel.LookupGPU(o.GPU)
}

func parseDType(s string) (perfmodel.DType, error) {
	if s == "" || s == "auto" {
		return "", nil
	}
	return perfmodel.ParseDType(s)
}
