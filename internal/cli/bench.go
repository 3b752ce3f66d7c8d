package cli

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokentrace/tokentrace/internal/bench"
	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/live"
	"github.com/tokentrace/tokentrace/internal/redact"
	"github.com/tokentrace/tokentrace/internal/serve"
	"github.com/tokentrace/tokentrace/internal/simulate"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// benchLong is bench's help.
const benchLong = `bench sends a workload to an OpenAI-compatible server and measures every
request: TTFT, TPOT, ITL, E2E and their stages, timestamped at the moment bytes
arrive. Requests are scheduled on absolute instants (open loop with --rate,
closed loop with --concurrency, both for a rate with a cap), so latency is
reported from the intended send time too, free of coordinated omission.

With no --url it starts the embedded simulated engine (tokentrace serve) on a
loopback port; its settings are serve's flags with a sim- prefix
(--sim-model, --sim-tensor-parallel-size, --sim-enable-prefix-caching, …).

Results go to a folder (--output-dir): requests.jsonl (one record per
request, written as each finishes), summary.json, run.json, command.txt and
config.json. The console summary is tokentrace report's.

Exit status: 0 when the run completed (and every --slo holds), 3 when an SLO
failed, 2 for bad flags, 1 when the run could not happen or every request
failed, 130 when interrupted (Ctrl-C; results written all the same;
docs/cli.md).`

func newBenchCmd() *cobra.Command {
	opts := bench.DefaultOptions()
	sim := serve.DefaultOptions()
	self := bench.DefaultSelfTestOptions()
	var selfTest bool
	var otlpEndpoint string
	var g, simG *flagGroup
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmark an OpenAI-compatible server (or the embedded engine) with numbers that are right",
		Long:  benchLong,
		Example: `  tokentrace bench
  tokentrace bench --url http://localhost:8000 --rate 20 --duration 2m --slo "ttft:p99<=1.5s,tpot:p99<=50ms"
  tokentrace bench --url http://localhost:8000 --concurrency 64 --requests 2000 --input-tokens uniform:500-1500
  tokentrace bench --trace AzureLLMInferenceTrace_conv.csv --trace-window 0s+2m
  tokentrace bench --sweep auto --slo "ttft:p99<=500ms"
  tokentrace bench --url http://serve:8000 --rate 200 --duration 5m --shard 2/4 --shard-start-at 2025-06-01T12:00:00Z
  tokentrace bench --self-test`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			defer tuneGC()()
			if selfTest {
				return bench.SelfTest(ctx, self, cmd.OutOrStdout())
			}
			if err := drawSeed(cmd, g, rand.Uint64N(1<<31)+1); err != nil {
				return err
			}
			var serveTracer trace.Tracer // the embedded engine's, when tracing
			cfg, err := benchConfig(opts, &sim, g, simG, &serveTracer)
			if err != nil {
				return err
			}
			stop, err := instrumentBench(ctx, cmd, &cfg, g, otlpEndpoint, &serveTracer)
			defer stop()
			if err != nil {
				return err
			}
			cfg.Run = benchRun(opts, cfg, sim.Engine, g)
			describeBenchRun(cmd, &cfg, opts.Workload.TimeScale, opts.Progress)
			if cfg.Live, err = listenLive(cmd, opts.Live); err != nil {
				return err
			}
			res, err := bench.Run(ctx, cfg, cmd.OutOrStdout())
			if err == nil {
				benchWhatIf(ctx, cmd.OutOrStdout(), res, cfg.SLOs)
			}
			return benchExit(cmd, cfg, sim.Engine.Profile, opts.SLO, res, err)
		},
	}
	f := cmd.Flags()
	g = newFlagGroup(f, "", "")
	bindBenchFlags(g, &opts)
	bindTracingFlag(g, &otlpEndpoint)
	f.BoolVar(&selfTest, "self-test", false, "measure this client's own speed and fidelity against loopback servers, then exit")
	bindSelfTestFlags(g, &self)
	// The embedded engine's settings, as tokentrace serve names them, with
	// a sim- prefix (where it listens is bench's business).
	simG = newFlagGroup(f, "sim-", "embedded engine: ")
	bindEngineFlags(simG, &sim.Engine)
	bindServerFlags(simG, &sim)
	return cmd
}

// instrumentBench starts the run's trace and GenAI metrics exporters, and
// the embedded engine's tracer into serveTracer; stop ends what started,
// last first, and is never nil.
func instrumentBench(ctx context.Context, cmd *cobra.Command, cfg *bench.Config, g *flagGroup, endpoint string,
	serveTracer *trace.Tracer) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	tracer, stopTracing, err := startTracing(ctx, endpoint, "tokentrace-bench", cmd.ErrOrStderr())
	if err != nil {
		return stop, usageError(fmt.Errorf("bench: %w", err), g)
	}
	stops = append(stops, stopTracing)
	cfg.Tracer = tracer
	genai, stopMetrics, err := startGenAIMetrics(ctx, endpoint, "tokentrace-bench", true, cmd.ErrOrStderr())
	if err != nil {
		return stop, usageError(fmt.Errorf("bench: %w", err), g)
	}
	stops = append(stops, stopMetrics)
	cfg.GenAI = genai
	if cfg.StartEmbedded != nil {
		st, stopServe, err := startTracing(ctx, endpoint, "tokentrace-serve", cmd.ErrOrStderr())
		if err != nil {
			return stop, err
		}
		stops = append(stops, stopServe)
		*serveTracer = st
	}
	return stop, nil
}

// benchRun is bench's run typed for config.json's "run", from its typed
// options: the workload and endpoint it sent, whether it streamed and
// asked for ignore_eos (cfg's: the embedded engine is asked unless told), the
// rest at simulate's defaults; the engine it embedded (sim), none for a
// server; the settings given.
func benchRun(opts bench.Options, cfg bench.Config, sim engine.Options, g *flagGroup) simulate.RunConfig {
	rc := simulate.RunConfig{Options: simulate.DefaultOptions(), Given: g.givenFields(), Stream: &cfg.Target.Stream}
	o := &rc.Options
	o.Workload, o.Endpoint, o.IgnoreEOS = opts.Workload, opts.Endpoint, cfg.Target.IgnoreEOS
	if cfg.Embedded() {
		rc.SimEngine = &sim
	}
	return rc
}

// describeBenchRun warns of a trace spanning days and sets what the run
// records of its command line and where it logs and shows progress.
func describeBenchRun(cmd *cobra.Command, cfg *bench.Config, timeScale float64, progress string) {
	if rp, ok := cfg.Workload.(*workload.Replay); ok && rp.Span() > workload.LongSpan {
		fmt.Fprintf(cmd.ErrOrStderr(), "bench: warning: the trace's schedule spans %s (%.0f days) at --time-scale %g: the run sleeps that long between its first and last request; narrow it with --trace-window or speed it up with --time-scale\n",
			rp.Span().Round(time.Second), rp.Span().Hours()/24, timeScale)
	}
	cfg.Command = commandLine(os.Args)
	echo := flagValues(cmd.Flags())
	cfg.Echo = echo
	cfg.Log = cmd.ErrOrStderr()
	if isTerminal(os.Stderr) && cmd.ErrOrStderr() == os.Stderr {
		cfg.Progress = os.Stderr
	}
	if progress == "" && !isTerminal(os.Stdout) {
		cfg.ProgressView = live.ProgressOff // the table by default only on a terminal
	}
}

// listenLive opens the live page's listener (bench --live), warning when
// it is not on loopback: the page has no authentication.
func listenLive(cmd *cobra.Command, addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bench: --live: %w", err)
	}
	if !live.IsLoopback(addr) {
		fmt.Fprintf(cmd.ErrOrStderr(), "bench: warning: --live %s listens beyond loopback: anyone who can reach it sees the run (the page has no authentication)\n", addr)
	}
	return ln, nil
}

// benchExit maps a finished run to bench's exit status (docs/cli.md).
func benchExit(cmd *cobra.Command, cfg bench.Config, profile, slo string, res *bench.Result, err error) error {
	if mns := (*bench.ModelNotServedError)(nil); errors.As(err, &mns) {
		return &ExitError{Code: ExitUsage, Err: fmt.Errorf("bench: %w", err)}
	}
	if err != nil {
		return err
	}
	if cfg.StartEmbedded != nil && profile != "" {
		if err := warnOutsideProfile(cmd.ErrOrStderr(), profile, cfg.OutDir, 1); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	if res.Interrupted() {
		return &ExitError{Code: ExitInterrupted, Err: fmt.Errorf("bench: interrupted; the results of the requests that finished are in %s", res.OutDir)}
	}
	if why, all := res.AllFailed(); all {
		return &ExitError{Code: ExitFailed, Err: fmt.Errorf("bench: every request failed (%d), most often with %s; records in %s",
			res.Report.Summary.Failed, why, res.OutDir)}
	}
	if res.SLOsFailed() {
		return &ExitError{Code: ExitSLOFailed, Err: fmt.Errorf("bench: an SLO failed (%s)", slo)}
	}
	return nil
}

// drawSeed sets --seed to seed when it was not given, so that each run
// sends prompts of its own (a server's prefix cache warmed by an earlier
// run would otherwise serve them), and says so; config.json records it.
func drawSeed(cmd *cobra.Command, g *flagGroup, seed uint64) error {
	if g.given("seed") {
		return nil
	}
	if err := cmd.Flags().Set("seed", strconv.FormatUint(seed, 10)); err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "bench: --seed %d drawn for this run's arrivals and prompts (give --seed %d to send the same again)\n", seed, seed)
	return nil
}

// benchConfig checks bench's flags and, without --url, the embedded
// engine's, and wires the engine in. sim is the options the --sim-* flags
// set: their finish hooks (--sim-engine's defaults, legacy spellings)
// complete it in place.
func benchConfig(opts bench.Options, sim *serve.Options, g, simG *flagGroup, tracer *trace.Tracer) (bench.Config, error) {
	cfg, err := opts.Config(g.given, time.Now())
	if err != nil {
		return cfg, usageError(fmt.Errorf("bench: %w", err), g)
	}
	if cfg.Target.BaseURL != "" {
		return cfg, nil
	}
	if err := simG.finish(); err != nil {
		return cfg, usageError(fmt.Errorf("bench: embedded engine: %w", err), simG)
	}
	scfg, err := sim.Config()
	if err != nil {
		return cfg, usageError(fmt.Errorf("bench: embedded engine: %w", err), simG)
	}
	cfg.StartEmbedded = func(ctx context.Context) (*bench.Embedded, error) {
		scfg.Tracer = *tracer
		srv, err := serve.Start(ctx, scfg, "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		return &bench.Embedded{URL: srv.URL(), Describe: srv.Describe(), EngineFamily: sim.Engine.Engine, Close: srv.Close}, nil
	}
	return cfg, nil
}

// bindBenchFlags binds bench's flags: the target, the workload group,
// sweeps and SLOs, and the results folder.
func bindBenchFlags(g *flagGroup, o *bench.Options) {
	g.stringVar(&o.URL, "url", "base URL of an OpenAI-compatible server (with or without /v1); none: start the embedded engine")
	bindRequestFlags(g, &o.Endpoint, &o.IgnoreEOS)
	g.stringVar(&o.Model, "model", "model name to send (default: the first of GET /v1/models)")
	g.stringVar(&o.APIKey, "api-key", "bearer token (default: $OPENAI_API_KEY)")
	g.stringArrayVar(&o.Headers, "header", `extra request header "Name: value" (repeatable)`)
	g.boolVar(&o.Stream, "stream", "stream the answers (server-sent events)")
	g.boolVar(&o.MinTokens, "min-tokens", "send min_tokens = max_tokens (vLLM)")
	g.boolVar(&o.ContinuousUsage, "continuous-usage", "ask for token counts on every chunk (vLLM's continuous_usage_stats; on by default for the embedded engine)")
	g.stringVar(&o.ServerMetrics, "server-metrics", "ask the server for its per-request evidence: auto (in the detected engine's dialect: vLLM's include_metrics; llama.cpp's timings, TGI's headers and tokentrace's Server-Timing come unasked), off, vllm (include_metrics) or tokentrace (return_metrics)")
	// --return-metrics, the former spelling of --server-metrics tokentrace.
	g.boolVar(&o.ReturnMetrics, "return-metrics", "ask a tokentrace server for its per-request metrics object")
	if f := g.fs.Lookup(g.prefix + "return-metrics"); f != nil {
		f.Hidden, f.Deprecated = true, "use --"+g.prefix+"server-metrics tokentrace"
	}
	g.durationVar(&o.Timeout, "timeout", "fail a request that receives nothing for this long")
	g.stringVar(&o.PromptTokenizer, "prompt-tokenizer", "what sizes generated prompts: auto (the server's /tokenize where it offers one, llama.cpp or vLLM; else tokentrace's, with the served-length gap reported), server (required) or builtin")
	bindWorkloadFlags(g, &o.Workload)
	bindAgentFlags(g, o)
	g.stringVar(&o.Sweep, "sweep", "run several points: a list of rates (or of concurrencies without --rate), or auto")
	g.durationVar(&o.SweepMinSpan, "sweep-min-span", "sweep: each rate point sends for at least this long (more requests than --requests if needed), so a short burst that the server absorbs is not taken for sustained capacity")
	g.stringVar(&o.BetweenCells, "between-cells", "sweep: before each cell, reset (empty the server's prefix cache: vLLM and serve /reset_prefix_cache, SGLang /flush_cache, llama.cpp slot erase) or none")
	g.stringVar(&o.BetweenCellsCmd, "between-cells-cmd", "sweep: a shell command run before each cell (bounded by 60 s; a failure is a warning), with TOKENTRACE_CELL, TOKENTRACE_CELL_INDEX and TOKENTRACE_PREV_CELL set")
	bindSLOFlag(g, &o.SLO, `objectives, e.g. "ttft:p99<=1.5s,tpot:p99<=50ms"; with --sweep auto: capacity search`)
	g.stringVar(&o.Shard, "shard", "send this share of the workload, INDEX/COUNT (0/4 … 3/4): COUNT generators together send exactly the workload (docs/scale.md)")
	g.stringVar(&o.ShardStartAt, "shard-start-at", "start sending at this RFC 3339 instant (give every shard the same, a minute or more ahead)")
	bindOutputDir(g, &o.OutputDir, "results folder (default ./results/<timestamp>/)")
	g.boolVar(&o.NoCalibration, "no-calibration", "skip the loopback calibration of the client's overhead")
	g.durationVar(&o.Grace, "grace", "after a stop (Ctrl-C), how long in-flight requests may finish")
	g.durationVar(&o.ScrapeInterval, "scrape-interval", "how often to read the target's /metrics during the run (also read at its start and end; negative: only then)")
	g.stringVar(&o.Live, "live", "serve a live page of the run at this address while it goes (--live alone: "+live.DefaultAddr+"; give --live=HOST:PORT): rates, in flight, percentiles with SLO lines, stages, failures, server gauges, provisional findings (docs/bench.md)")
	if f := g.fs.Lookup(g.prefix + "live"); f != nil {
		f.NoOptDefVal = live.DefaultAddr
	}
	g.durationVar(&o.LiveWindow, "live-window", "the sliding window of the live page and the terminal table (default 10s)")
	g.stringVar(&o.Progress, "progress", "the terminal view while the run goes: table (the default on a terminal), plain (one line) or off")
}

// bindAgentFlags binds agent sessions' settings and their tool endpoint
// (docs/bench.md, "Agent sessions").
func bindAgentFlags(g *flagGroup, o *bench.Options) {
	w := &o.Workload
	g.intVar(&w.AgentSteps, "agent-steps", "agent sessions: model calls per session; every step but the last asks for --agent-tools tool calls, and the next step's prompt grows by their results (--think-time between steps)")
	g.intVar(&w.AgentTools, "agent-tools", "agent sessions: tool calls per step")
	g.stringVar(&w.ToolMode, "tool-mode", "agent sessions: make a step's tool calls parallel (at once) or sequential")
	g.stringVar(&w.ToolLatency, "tool-latency", "agent sessions: the tool simulator's latency per call: "+workload.DelaySyntax)
	g.stringVar(&w.ToolResultTokens, "tool-result-tokens", "agent sessions: a tool result's length: a length or a distribution, as --input-tokens")
	g.stringVar(&w.AgentSessions, "agent-sessions", `agent sessions from a JSONL file, one {"steps": [{"input_tokens", "output_tokens", "think", "parallel", "tools": [{"name", "latency", "result_tokens"}]}]} per line`)
	g.stringVar(&o.ToolURL, "tool-url", "agent sessions: POST tool calls to this URL (default: the built-in tool simulator on a loopback port)")
	g.durationVar(&o.ToolTimeout, "tool-timeout", "agent sessions: fail a step whose tool call has not answered within this")
}

// bindSelfTestFlags binds the sizes of bench --self-test.
func bindSelfTestFlags(g *flagGroup, o *bench.SelfTestOptions) {
	g.intVar(&o.Streams, "self-test-streams", "self-test: concurrent streams of the fidelity test")
	g.durationVar(&o.Gap, "self-test-gap", "self-test: time between a stream's tokens (starts spread over a stream's life)")
	g.float64Var(&o.Rate, "self-test-rate", "self-test: target rate of the rate test (req/s)")
	g.durationVar(&o.RateDuration, "self-test-duration", "self-test: length of the rate test")
	g.intVar(&o.Tokens, "self-test-tokens", "self-test: tokens per stream")
	g.intVar(&o.Many, "self-test-requests", "self-test: requests of the memory-bound test")
}

// flagValues is the configuration as given, for config.json (secrets
// hidden), under the canonical flag names.
func flagValues(fs *pflag.FlagSet) map[string]string {
	m := map[string]string{}
	fs.VisitAll(func(fl *pflag.Flag) {
		if fl.Annotations[aliasOf] != nil {
			return
		}
		v := fl.Value.String()
		if fl.Name == "api-key" && v != "" {
			v = redact.Mask
		}
		m[fl.Name] = redact.Text(v) // URL userinfo, Authorization and api-key headers
	})
	return m
}

// commandLine is args as config.json and command.txt record them: the
// value of --api-key, and every credential internal/redact recognises (URL
// userinfo, Authorization and api-key headers), masked.
func commandLine(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = redact.Text(a)
		if i > 0 && args[i-1] == "--api-key" {
			out[i] = redact.Mask
		}
		if v, ok := strings.CutPrefix(a, "--api-key="); ok && v != "" {
			out[i] = "--api-key=" + redact.Mask
		}
	}
	return out
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
