package cli

import (
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/serve"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// The flag groups: each concept has one flag name, defined here once and
// bound by every command that takes it (docs/cli.md lists them). Names
// follow vLLM where vLLM has the setting, bench's for the workload. Old
// spellings stay as hidden aliases that print a notice.

// bindModelFlags binds what the performance model needs to price a step:
// the model, the hardware, precisions and speculative decoding (estimate;
// part of bindEngineFlags).
func bindModelFlags(g *flagGroup, o *engine.Options) {
	g.stringVar(&o.Model, "model", "model: a catalog name (tokentrace estimate --list) or a Hugging Face config.json (file or folder)")
	g.stringVar(&o.GPU, "gpu", "GPU: a catalog name (tokentrace estimate --list)")
	bindGPUFileFlag(g, &o.GPUFile)
	g.intVar(&o.TensorParallelSize, "tensor-parallel-size", "GPUs per replica (0: the smallest power of two at which the weights fit)")
	g.stringVar(&o.DType, "dtype", "weight precision: bf16, fp16, fp8, int8, int4, mxfp4, nvfp4 (4-bit floats: the FP4 tensor cores where the GPU has them, else weight-only)")
	g.stringVar(&o.KVCacheDType, "kv-cache-dtype", "KV cache precision: auto (the weights' if 16-bit, else bf16), bf16, fp16, fp8, int8")
	g.float64Var(&o.GPUMemoryUtilization, "gpu-memory-utilization", "fraction of each GPU's memory for weights and KV cache, in (0, 1]")
	g.intVar(&o.SpeculativeK, "speculative-k", "speculative decoding: draft tokens per step (0: off)")
	g.float64Var(&o.SpeculativeAlpha, "speculative-alpha", "speculative decoding: per-token acceptance rate")
	g.stringVar(&o.DraftModel, "draft-model", "speculative draft model whose cost is added to each step (catalog name or config.json); none: free n-gram proposals")
	g.stringVar(&o.Profile, "profile", "performance profile (tokentrace calibrate) for this model, GPU, TP and precisions: its fitted constants replace the GPU family's defaults")
	g.onFinish(func() error { return fillFromProfile(g, o) })
	g.alias("tp", "tensor-parallel-size", true)
	g.alias("kv-dtype", "kv-cache-dtype", true)
	g.alias("mem-util", "gpu-memory-utilization", true)
	g.alias("spec-k", "speculative-k", true)
	g.alias("spec-alpha", "speculative-alpha", true)
}

// fillFromProfile gives the settings a --profile records (model, GPU, GPU
// file, engine, TP, precisions) to those not given as flags; a flag given
// wins, and one that disagrees with the profile is refused when the
// profile is checked against the configuration (Profile.Matches).
func fillFromProfile(g *flagGroup, o *engine.Options) error {
	if o.Profile == "" {
		return nil
	}
	prof, err := perfmodel.LoadProfile(o.Profile)
	if err != nil {
		return field.Wrap("profile", err)
	}
	for _, s := range []struct {
		field, from string
		to          *string
	}{{"model", prof.Model, &o.Model}, {"gpu", prof.GPU, &o.GPU}, {"gpu_file", prof.GPUFile, &o.GPUFile},
		{"engine", prof.Engine, &o.Engine}, {"dtype", prof.DType, &o.DType}, {"kv_cache_dtype", prof.KVDType, &o.KVCacheDType}} {
		if s.from != "" && !g.given(s.field) {
			*s.to = s.from
		}
	}
	if prof.TP > 0 && !g.given("tensor_parallel_size") {
		o.TensorParallelSize = prof.TP
	}
	return nil
}

// bindGPUFileFlag binds --gpu-file, the hardware catalog that extends the
// built-in one (the model flags; report's what-if).
func bindGPUFileFlag(g *flagGroup, p *string) {
	g.stringVar(p, "gpu-file", "YAML hardware catalog that adds to or overrides the built-in one")
}

// bindEngineFlags binds the simulated engine's settings: the model flags
// and the scheduler's (serve; bench as --sim-*; simulate).
func bindEngineFlags(g *flagGroup, o *engine.Options) {
	bindModelFlags(g, o) // first: a --profile's engine reaches --engine's defaults
	bindEngineFamilyFlag(g, o)
	g.intVar(&o.MaxNumSeqs, "max-num-seqs", "most running requests per step (0: vLLM's default for the GPU)")
	g.intVar(&o.MaxNumBatchedTokens, "max-num-batched-tokens", "token budget per step (0: vLLM's default for the GPU)")
	g.intVar(&o.BlockSize, "block-size", "KV cache block size in tokens")
	g.intVar(&o.NumGPUBlocksOverride, "num-gpu-blocks-override", "KV cache blocks, instead of what fits in GPU memory (0: derived)")
	g.intVar(&o.MaxModelLen, "max-model-len", fmt.Sprintf("longest prompt + output (0: the model's context length, or %d when unknown; less if the KV cache holds less)", engine.DefaultMaxModelLen))
	g.intVar(&o.MaxWaiting, "max-waiting", "bound on the waiting queue; requests beyond it are refused (0: unbounded)")
	g.boolVar(&o.EnablePrefixCaching, "enable-prefix-caching", "reuse KV blocks of shared prompt prefixes")
	g.boolVar(&o.EnableChunkedPrefill, "enable-chunked-prefill", "split long prompts across steps (=false: whole prompts only)")
	g.stringVar(&o.SchedulingPolicy, "scheduling-policy", "fcfs or priority (requests' \"priority\" field, lower first)")
	g.stringVar(&o.NaturalOutputTokens, "natural-output-tokens", "where an answer ends on its own unless max_tokens stops it first: "+workload.DistSyntax+", or max (never early)")
	g.stringVar(&o.ReasoningTokens, "reasoning-tokens", "a reasoning model: how many of each answer's first tokens are reasoning, streamed as reasoning deltas before the answer ("+workload.DistSyntax+"; counted within max_tokens; empty: none)")
	g.uint64Var(&o.Seed, "seed", "seed of the engine's draws (natural output lengths, speculative acceptance)")
	bindLegacyOutputLength(g, o)
}

// bindEngineFamilyFlag binds --engine, the serving engine's family: once
// flags and config files are read, its scheduler defaults fill the
// settings the user did not give (engine.Options.WithEngine), and its
// constants time the steps.
func bindEngineFamilyFlag(g *flagGroup, o *engine.Options) {
	g.stringVar(&o.Engine, "engine", "serving engine: "+strings.Join(engine.FamilyNames(), ", ")+" — its scheduler defaults for the settings not given, and its constants fitted on public measurements where it ships them for the GPU (docs/engines.md); empty: vLLM's settings, the GPU family's constants")
	if g.skip["engine"] {
		return
	}
	g.onFinish(func() error {
		var err error
		*o, err = o.WithEngine(g.given)
		return err
	})
}

// bindLegacyOutputLength keeps serve's former --output-dist, --output-mean,
// --output-sigma, --output-min and --output-max: given, and without
// --natural-output-tokens, they are folded into it.
func bindLegacyOutputLength(g *flagGroup, o *engine.Options) {
	if g.skip["natural-output-tokens"] {
		return
	}
	l := struct {
		dist        string
		mean, sigma float64
		lo, hi      int
	}{dist: "lognormal", mean: 256, sigma: 1}
	scratch := pflag.NewFlagSet("legacy", pflag.ContinueOnError)
	scratch.StringVar(&l.dist, "output-dist", l.dist, "natural output length distribution: lognormal, exponential, uniform, fixed, max")
	scratch.Float64Var(&l.mean, "output-mean", l.mean, "natural output length mean (lognormal, exponential, fixed)")
	scratch.Float64Var(&l.sigma, "output-sigma", l.sigma, "lognormal natural output length shape")
	scratch.IntVar(&l.lo, "output-min", l.lo, "uniform natural output length minimum")
	scratch.IntVar(&l.hi, "output-max", l.hi, "uniform natural output length maximum")
	var names []string
	scratch.VisitAll(func(f *pflag.Flag) {
		names = append(names, f.Name)
		g.legacy(f.Value, f.Name, "natural-output-tokens", f.Usage)
	})
	g.onFinish(func() error {
		used := false
		for _, n := range names {
			used = used || flagGiven(g.fs, g.prefix+n)
		}
		if !used || g.fs.Lookup(g.prefix+"natural-output-tokens").Changed {
			return nil // the canonical flag wins
		}
		switch l.dist {
		case "lognormal":
			o.NaturalOutputTokens = fmt.Sprintf("lognormal:mean=%g,sigma=%g", l.mean, l.sigma)
		case "exponential":
			o.NaturalOutputTokens = fmt.Sprintf("exponential:mean=%g", l.mean)
		case "uniform":
			o.NaturalOutputTokens = fmt.Sprintf("uniform:%d-%d", l.lo, l.hi)
		case "fixed":
			o.NaturalOutputTokens = strconv.FormatFloat(math.Round(l.mean), 'f', -1, 64)
		case "max":
			o.NaturalOutputTokens = "max"
		default:
			return field.Invalid("natural_output_tokens", l.dist, "unknown distribution (given as --%soutput-dist; want lognormal, exponential, uniform, fixed or max)", g.prefix)
		}
		return nil
	})
}

// bindServerFlags binds the OpenAI server's own settings around the
// engine (serve; bench as --sim-*).
func bindServerFlags(g *flagGroup, o *serve.Options) {
	bindAnswerFlags(g, &o.ServedModelName, &o.QueueFullStatus)
	g.int64Var(&o.MaxBodyBytes, "max-body-bytes", "largest request body accepted")
	g.stringVar(&o.ReasoningField, "reasoning-field", "chat field of reasoning tokens (--reasoning-tokens): reasoning (vLLM's) or reasoning_content (DeepSeek's)")
	g.durationVar(&o.ReadHeaderTimeout, "read-header-timeout", "deadline for a request's headers, from the connection's accept or its previous answer")
	g.durationVar(&o.BodyTimeout, "body-timeout", "deadline for a request's body, from the end of its headers (408 after it)")
	g.durationVar(&o.IdleTimeout, "idle-timeout", "how long a keep-alive connection may wait for its next request")
	g.intVar(&o.MaxConnections, "max-connections", "most client connections open at once; more wait to be accepted (0: from the descriptor limit)")
	f := &o.Faults
	g.uint64Var(&f.Seed, "fault-seed", "seed of fault injection draws")
	g.float64Var(&f.Rate429, "fault-429-rate", "fraction of requests answered 429")
	g.float64Var(&f.Rate500, "fault-500-rate", "fraction of requests answered 500")
	g.float64Var(&f.Rate503, "fault-503-rate", "fraction of requests answered 503")
	g.float64Var(&f.RateContextLength, "fault-400-rate", "fraction of requests answered 400 (context length exceeded)")
	g.float64Var(&f.SlowFirstTokenRate, "fault-slow-first-token-rate", "fraction of requests whose first token is delayed")
	g.durationVar(&f.SlowFirstTokenDelay, "fault-slow-first-token-delay", "delay of a slow first token")
	g.float64Var(&f.StallRate, "fault-stall-rate", "fraction of requests that stall once mid-stream")
	g.durationVar(&f.StallDuration, "fault-stall-duration", "length of a mid-stream stall")
	g.float64Var(&f.ResetRate, "fault-reset-rate", "fraction of requests whose connection is reset mid-stream")
}

// bindRoleFlags binds serve's part in disaggregated prefill and decode.
func bindRoleFlags(g *flagGroup, o *serve.Options) {
	g.stringVar(&o.Role, "role", "part in disaggregated prefill and decode (vLLM's kv_transfer_params): both, prefill or decode")
	g.stringVar(&o.KVLink, "kv-link", "link a decode request's KV cache is pulled over: "+strings.Join(perfmodel.LinkNames(), ", "))
}

// bindAnswerFlags binds how a server names its model and refuses requests
// beyond --max-waiting (serve; bench as --sim-*; simulate).
func bindAnswerFlags(g *flagGroup, servedModelName *string, queueFullStatus *int) {
	g.stringVar(servedModelName, "served-model-name", "model name clients send (default: the model's name)")
	g.intVar(queueFullStatus, "queue-full-status", "status when the waiting queue (--max-waiting) is full: 429 or 503")
}

// bindRequestFlags binds how each request is asked for: the API and
// whether answers run to max_tokens (bench; simulate).
func bindRequestFlags(g *flagGroup, endpoint *string, ignoreEOS *bool) {
	g.stringVar(endpoint, "endpoint", "API: chat (/v1/chat/completions), completions (/v1/completions), responses (/v1/responses), messages (/v1/messages, Anthropic's) ollama (/api/chat, Ollama's native NDJSON) or sglang (/generate, SGLang's native API, whose meta_info gives each request's queue wait)")
	g.boolVar(ignoreEOS, "ignore-eos", "send ignore_eos so answers run to max_tokens (vLLM, SGLang; on by default for the embedded engine)")
}

// bindSLOFlag binds --slo (bench; report; simulate).
func bindSLOFlag(g *flagGroup, slo *string, usage string) {
	g.stringVar(slo, "slo", usage)
}

// bindWorkloadFlags binds what is sent and when (bench; simulate; plan).
func bindWorkloadFlags(g *flagGroup, o *workload.Options) {
	g.float64Var(&o.Rate, "rate", fmt.Sprintf("open loop: arrivals per second (default %d when no --concurrency)", workload.DefaultRate))
	g.stringVar(&o.Arrival, "arrival", "arrival process: poisson, gamma (with --burstiness) or constant")
	g.float64Var(&o.Burstiness, "burstiness", "gamma shape: 1 is Poisson, below 1 burstier, above 1 smoother")
	g.intVar(&o.Concurrency, "concurrency", "closed loop: workers; with --rate: the cap on requests in flight")
	g.intVar(&o.Requests, "requests", fmt.Sprintf("measured requests (default %d when no --duration)", workload.DefaultRequests))
	g.durationVar(&o.Duration, "duration", "measured duration")
	g.stringVar(&o.Warmup, "warmup", "warm-up excluded from results: a number of requests or a duration")
	g.stringVar(&o.RampUp, "ramp-up", "closed loop: start the workers one after another, so the first wave reaches the server in order: over a span (2s: worker k of N at k/N of it) or first-token (each when the previous one's first token arrives); default: all at once")
	g.uint64Var(&o.Seed, "seed", "seed of arrivals and prompts")
	g.stringVar(&o.Trace, "trace", "replay a trace's arrival times and lengths: Azure LLM inference CSV (2023, 2024), BurstGPT CSV or Mooncake JSONL (told apart by content)")
	g.float64Var(&o.TimeScale, "time-scale", "multiply trace times by this (0.5 replays twice as fast)")
	g.stringVar(&o.TraceWindow, "trace-window", "replay only START-END or START+LENGTH of the trace, e.g. 10m+5m or 24h+1h (a multi-day trace's second day)")
	g.stringVar(&o.TraceModel, "trace-model", "replay only a BurstGPT trace's rows of this model (its Model column, e.g. ChatGPT or GPT-4)")
	g.intVar(&o.TraceBlockSize, "trace-block-size", fmt.Sprintf("tokens per block of a Mooncake trace's hash_ids (default %d, as Mooncake's traces)", workload.DefaultTraceBlockSize))
	g.stringVar(&o.InputTokens, "input-tokens", "prompt length: "+workload.DistSyntax)
	g.stringVar(&o.OutputTokens, "output-tokens", "max_tokens: a length or a distribution, as --input-tokens")
	g.intVar(&o.PrefixTokens, "prefix-tokens", "tokens shared by the prompts of a prefix group")
	g.intVar(&o.PrefixGroups, "prefix-groups", "number of distinct shared prefixes")
	g.intVar(&o.Turns, "turns", "turns per session; each turn resends the history")
	g.durationVar(&o.ThinkTime, "think-time", "pause between a turn's answer and the next turn")
	g.stringVar(&o.Prompts, "prompts", `prompt file: JSONL ({"prompt"…} or {"messages"…}, optional max_tokens) or ShareGPT JSON`)
}

// bindPricesFlag binds --prices, the file of GPU-hour prices that replaces
// built-in entries (estimate; plan).
func bindPricesFlag(g *flagGroup, path *string) {
	g.stringVar(path, "prices", "YAML price table (gpu, usd_per_gpu_hour, …) whose entries replace the built-in prices GPU by GPU (docs/plan.md)")
}

// listenAddr is where a server listens: --host and --port, as vLLM's.
type listenAddr struct {
	Host string
	Port int
}

// bindListenFlags binds --host and --port (serve, gateway). --addr
// HOST:PORT, the gateway's former flag, sets both.
func bindListenFlags(g *flagGroup, l *listenAddr) {
	g.stringVar(&l.Host, "host", "address to listen on")
	g.intVar(&l.Port, "port", "port to listen on (0: any free port)")
	if g.skip["host"] || g.skip["port"] {
		return
	}
	g.fs.AddFlag(&pflag.Flag{Name: g.prefix + "addr", Usage: "listen address HOST:PORT", Value: (*hostPort)(l),
		DefValue: net.JoinHostPort(l.Host, strconv.Itoa(l.Port)), Hidden: true,
		Deprecated:  "use --" + g.prefix + "host and --" + g.prefix + "port",
		Annotations: map[string][]string{aliasOf: {g.prefix + "host", g.prefix + "port"}}})
}

// addr checks the port and returns HOST:PORT.
func (l listenAddr) addr() (string, error) {
	if l.Port < 0 || l.Port > 65535 {
		return "", field.Invalid("port", l.Port, "not a port (0 to 65535; 0: any free port)")
	}
	return net.JoinHostPort(l.Host, strconv.Itoa(l.Port)), nil
}

// hostPort is --addr: HOST:PORT setting both fields.
type hostPort listenAddr

func (h *hostPort) String() string { return net.JoinHostPort(h.Host, strconv.Itoa(h.Port)) }
func (h *hostPort) Type() string   { return "host:port" }
func (h *hostPort) Set(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return err
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return fmt.Errorf("port %q is not a number", port)
	}
	h.Host, h.Port = host, p
	return nil
}

// bindOutputDir binds --output-dir, the folder a run writes (bench;
// simulate). --out, bench's former flag, stays as an alias.
func bindOutputDir(g *flagGroup, dir *string, usage string) {
	g.stringVar(dir, "output-dir", usage)
	g.alias("out", "output-dir", true)
}

// bindOutputFile binds --output/-o, the file a command writes (report).
func bindOutputFile(g *flagGroup, file *string, usage string) {
	g.bind("output", usage, func(fs *pflag.FlagSet, n, u string) { fs.StringVarP(file, n, "o", *file, u) })
}

// verifyFlags are verify's own settings.
type verifyFlags struct {
	applied []string
	ledger  string
	draws   int
}

// bindVerifyFlags binds verify's flags: the levers applied by hand, the
// ledger, and the twin's draws.
func bindVerifyFlags(g *flagGroup, v *verifyFlags) {
	g.stringArrayVar(&v.applied, "applied", "a change the runs' evidence cannot show, LEVER=VALUE (a what-if lever or its setting: max-num-seqs=4, enable_prefix_caching=true), or LEVER=FROM:TO where the first run's value is not in its evidence either (max-num-seqs=2:4); repeatable")
	g.stringVar(&v.ledger, "ledger", "append this verify to the ledger FILE (JSONL); alone, without runs: summarise the twin's track record per lever")
	g.intVar(&v.draws, "draws", "seeds the twin is run over for each prediction's interval (at least 2)")
}
