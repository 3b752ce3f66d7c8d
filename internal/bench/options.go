package bench

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// Options are the flags of `tokentrace bench` as given; Config turns them
// into a checked Config, or says clearly which flag is wrong.
type Options struct {
	URL, Endpoint, Model, APIKey string
	Headers                      []string
	Stream, IgnoreEOS, MinTokens bool
	ContinuousUsage              bool
	ReturnMetrics                bool
	Timeout                      time.Duration

	Rate        float64
	Arrival     string
	Burstiness  float64
	Concurrency int
	Requests    int
	Duration    time.Duration
	Warmup      string
	Seed        uint64

	Trace       string
	TimeScale   float64
	TraceWindow string

	Sweep        string
	SweepMinSpan time.Duration
	SLO          string

	InputTokens, OutputTokens  string
	PrefixTokens, PrefixGroups int
	Turns                      int
	Think                      time.Duration
	Prompts                    string

	Out           string
	NoCalibration bool
	Grace         time.Duration
}

// Defaults of the run when neither is given.
const (
	DefaultRate     = 10
	DefaultRequests = 100
)

// DefaultOptions are bench's defaults.
func DefaultOptions() Options {
	return Options{
		Endpoint: EndpointChat, Stream: true, Timeout: 5 * time.Minute,
		Arrival: string(workload.Poisson), Burstiness: 1, Seed: 1,
		TimeScale: 1, InputTokens: "256", OutputTokens: "64", PrefixGroups: 1, Turns: 1,
		Grace: 5 * time.Second, SweepMinSpan: 10 * time.Second,
	}
}

// BindFlags defines bench's flags on fs.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.URL, "url", o.URL, "base URL of an OpenAI-compatible server (with or without /v1); none: start the embedded engine")
	fs.StringVar(&o.Endpoint, "endpoint", o.Endpoint, "API: chat (/v1/chat/completions) or completions (/v1/completions)")
	fs.StringVar(&o.Model, "model", o.Model, "model name to send (default: the first of GET /v1/models)")
	fs.StringVar(&o.APIKey, "api-key", o.APIKey, "bearer token (default: $OPENAI_API_KEY)")
	fs.StringArrayVar(&o.Headers, "header", o.Headers, `extra request header "Name: value" (repeatable)`)
	fs.BoolVar(&o.Stream, "stream", o.Stream, "stream the answers (server-sent events)")
	fs.BoolVar(&o.IgnoreEOS, "ignore-eos", o.IgnoreEOS, "send ignore_eos so answers run to max_tokens (vLLM, SGLang; on by default for the embedded engine)")
	fs.BoolVar(&o.MinTokens, "min-tokens", o.MinTokens, "send min_tokens = max_tokens (vLLM)")
	fs.BoolVar(&o.ContinuousUsage, "continuous-usage", o.ContinuousUsage, "ask for token counts on every chunk (vLLM's continuous_usage_stats; on by default for the embedded engine)")
	fs.BoolVar(&o.ReturnMetrics, "return-metrics", o.ReturnMetrics, "ask a tokentrace server for its per-request metrics object")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "fail a request that receives nothing for this long")

	fs.Float64Var(&o.Rate, "rate", o.Rate, fmt.Sprintf("open loop: arrivals per second (default %d when no --concurrency)", DefaultRate))
	fs.StringVar(&o.Arrival, "arrival", o.Arrival, "arrival process: poisson, gamma (with --burstiness) or constant")
	fs.Float64Var(&o.Burstiness, "burstiness", o.Burstiness, "gamma shape: 1 is Poisson, below 1 burstier, above 1 smoother")
	fs.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "closed loop: workers; with --rate: the cap on requests in flight")
	fs.IntVar(&o.Requests, "requests", o.Requests, fmt.Sprintf("measured requests (default %d when no --duration)", DefaultRequests))
	fs.DurationVar(&o.Duration, "duration", o.Duration, "measured duration")
	fs.StringVar(&o.Warmup, "warmup", o.Warmup, "warm-up excluded from results: a number of requests or a duration")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "seed of arrivals and prompts")

	fs.StringVar(&o.Trace, "trace", o.Trace, "replay an Azure LLM inference trace CSV (arrival times and lengths)")
	fs.Float64Var(&o.TimeScale, "time-scale", o.TimeScale, "multiply trace times by this (0.5 replays twice as fast)")
	fs.StringVar(&o.TraceWindow, "trace-window", o.TraceWindow, "replay only START-END or START+LENGTH of the trace, e.g. 10m+5m")

	fs.StringVar(&o.Sweep, "sweep", o.Sweep, "run several points: a list of rates (or of concurrencies without --rate), or auto")
	fs.DurationVar(&o.SweepMinSpan, "sweep-min-span", o.SweepMinSpan, "sweep: each rate point sends for at least this long (more requests than --requests if needed), so a short burst that the server absorbs is not taken for sustained capacity")
	fs.StringVar(&o.SLO, "slo", o.SLO, `objectives, e.g. "ttft:p99<=1.5s,tpot:p99<=50ms"; with --sweep auto: capacity search`)

	fs.StringVar(&o.InputTokens, "input-tokens", o.InputTokens, "prompt length: N, uniform:A-B, normal:MEAN,SD, lognormal:MU,SIGMA or trace:FILE")
	fs.StringVar(&o.OutputTokens, "output-tokens", o.OutputTokens, "max_tokens: N or a distribution, as --input-tokens")
	fs.IntVar(&o.PrefixTokens, "prefix-tokens", o.PrefixTokens, "tokens shared by the prompts of a prefix group")
	fs.IntVar(&o.PrefixGroups, "prefix-groups", o.PrefixGroups, "number of distinct shared prefixes")
	fs.IntVar(&o.Turns, "turns", o.Turns, "turns per session; each turn resends the history")
	fs.DurationVar(&o.Think, "think-time", o.Think, "pause between a turn's answer and the next turn")
	fs.StringVar(&o.Prompts, "prompts", o.Prompts, `prompt file: JSONL ({"prompt"…} or {"messages"…}, optional max_tokens) or ShareGPT JSON`)

	fs.StringVar(&o.Out, "out", o.Out, "results folder (default ./results/<timestamp>/)")
	fs.BoolVar(&o.NoCalibration, "no-calibration", o.NoCalibration, "skip the loopback calibration of the client's overhead")
	fs.DurationVar(&o.Grace, "grace", o.Grace, "after a stop (Ctrl-C), how long in-flight requests may finish")
}

// Config checks the options and builds the run's configuration. changed
// reports whether the user set a flag (defaults differ for the embedded
// engine); now names the default results folder.
func (o Options) Config(changed func(name string) bool, now time.Time) (Config, error) {
	var cfg Config
	embedded := strings.TrimSpace(o.URL) == ""
	t := Target{BaseURL: strings.TrimSpace(o.URL), Endpoint: strings.ToLower(o.Endpoint), Model: o.Model,
		APIKey: o.APIKey, Stream: o.Stream, IgnoreEOS: o.IgnoreEOS, MinTokens: o.MinTokens,
		ContinuousUsage: o.ContinuousUsage, ReturnMetrics: o.ReturnMetrics, Timeout: o.Timeout}
	if t.APIKey == "" {
		t.APIKey = os.Getenv("OPENAI_API_KEY")
	}
	if embedded {
		if !changed("ignore-eos") {
			t.IgnoreEOS = true
		}
		if !changed("continuous-usage") {
			t.ContinuousUsage = true
		}
	}
	if t.Endpoint != EndpointChat && t.Endpoint != EndpointCompletions {
		return cfg, fmt.Errorf("--endpoint %q: want chat or completions", o.Endpoint)
	}
	if !embedded {
		if _, err := t.apiURL(""); err != nil {
			return cfg, fmt.Errorf("--url: %w", err)
		}
	}
	if o.Timeout <= 0 {
		return cfg, fmt.Errorf("--timeout %s: must be positive", o.Timeout)
	}
	for _, h := range o.Headers {
		k, v, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return cfg, fmt.Errorf("--header %q: want \"Name: value\"", h)
		}
		if t.Headers == nil {
			t.Headers = http.Header{}
		}
		t.Headers.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	cfg.Target = t

	// Load.
	l := Load{Rate: o.Rate, Burstiness: o.Burstiness, Concurrency: o.Concurrency, Requests: o.Requests,
		Duration: o.Duration, Seed: o.Seed}
	if changed("rate") && !(o.Rate > 0) || math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0) {
		return cfg, fmt.Errorf("--rate %g: must be a positive number of requests per second", o.Rate)
	}
	if o.Concurrency < 0 || changed("concurrency") && o.Concurrency == 0 {
		return cfg, fmt.Errorf("--concurrency %d: must be at least 1", o.Concurrency)
	}
	if o.Requests < 0 || changed("requests") && o.Requests == 0 {
		return cfg, fmt.Errorf("--requests %d: must be at least 1", o.Requests)
	}
	if o.Duration < 0 || changed("duration") && o.Duration == 0 {
		return cfg, fmt.Errorf("--duration %s: must be positive", o.Duration)
	}
	p, err := workload.ParseProcess(o.Arrival)
	if err != nil {
		return cfg, fmt.Errorf("--arrival: %w", err)
	}
	l.Arrival = p
	if p == workload.Gamma && !(o.Burstiness > 0) {
		return cfg, fmt.Errorf("--burstiness %g: must be positive", o.Burstiness)
	}
	if err := parseWarmup(o.Warmup, &l); err != nil {
		return cfg, err
	}
	chat := t.Endpoint == EndpointChat
	out, err := workload.ParseDist(o.OutputTokens, "output")
	if err != nil {
		return cfg, fmt.Errorf("--output-tokens: %w", err)
	}
	switch {
	case o.Trace != "":
		if o.Prompts != "" {
			return cfg, errors.New("--trace and --prompts cannot be combined: the trace gives the lengths")
		}
		rows, err := workload.ReadAzureTraceFile(o.Trace)
		if err != nil {
			return cfg, fmt.Errorf("--trace: %w", err)
		}
		w, err := workload.ParseWindow(o.TraceWindow)
		if err != nil {
			return cfg, fmt.Errorf("--trace-window: %w", err)
		}
		rp, err := workload.NewReplay(rows, w, o.TimeScale, chat, o.Seed)
		if err != nil {
			return cfg, fmt.Errorf("--trace: %w", err)
		}
		if changed("rate") || changed("sweep") {
			return cfg, errors.New("--trace sets the arrival times; leave out --rate and --sweep (use --time-scale)")
		}
		l.Arrivals = rp.Arrivals
		if !changed("requests") {
			l.Requests = rp.Len()
		}
		cfg.Workload = rp
	case o.Prompts != "":
		ps, err := workload.ReadPromptFile(o.Prompts)
		if err != nil {
			return cfg, fmt.Errorf("--prompts: %w", err)
		}
		cfg.Workload = &workload.Prompts{List: ps, Chat: chat, Output: out, Seed: o.Seed}
	default:
		in, err := workload.ParseDist(o.InputTokens, "input")
		if err != nil {
			return cfg, fmt.Errorf("--input-tokens: %w", err)
		}
		s := &workload.Synthetic{Chat: chat, Input: in, Output: out, PrefixTokens: o.PrefixTokens,
			PrefixGroups: o.PrefixGroups, Turns: o.Turns, Think: o.Think, Seed: o.Seed}
		if err := s.Validate(); err != nil {
			return cfg, fmt.Errorf("workload: %w", err)
		}
		cfg.Workload = s
	}
	if o.Trace == "" {
		if l.Rate == 0 && l.Concurrency == 0 {
			l.Rate = DefaultRate
		}
		if l.Requests == 0 && l.Duration == 0 {
			l.Requests = DefaultRequests
		}
	}
	cfg.Load = l

	slos, err := latency.ParseSLOs(o.SLO)
	if err != nil {
		return cfg, fmt.Errorf("--slo: %w", err)
	}
	cfg.SLOs = slos
	if o.Sweep != "" {
		kind := "rate"
		if !changed("rate") && changed("concurrency") {
			kind = "concurrency"
		}
		sw, err := ParseSweep(o.Sweep, kind)
		if err != nil {
			return cfg, fmt.Errorf("--sweep: %w", err)
		}
		if o.SweepMinSpan < 0 {
			return cfg, fmt.Errorf("--sweep-min-span %s: must not be negative", o.SweepMinSpan)
		}
		sw.MinSpan = o.SweepMinSpan
		if err := sw.Validate(slos); err != nil {
			return cfg, fmt.Errorf("--sweep: %w", err)
		}
		cfg.Sweep = sw
	} else if err := l.Validate(); err != nil {
		return cfg, err
	}
	if o.Grace < 0 {
		return cfg, fmt.Errorf("--grace %s: must not be negative", o.Grace)
	}
	cfg.Grace = o.Grace
	cfg.SkipCalibration = o.NoCalibration
	cfg.OutDir = o.Out
	if cfg.OutDir == "" {
		cfg.OutDir = DefaultOutDir(now)
	}
	return cfg, nil
}

// parseWarmup reads --warmup: a whole number of requests or a duration.
func parseWarmup(s string, l *Load) error {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n < 0 {
			return fmt.Errorf("--warmup %d: must not be negative", n)
		}
		l.WarmupRequests = n
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("--warmup %q: want a number of requests or a duration such as 10s", s)
	}
	l.WarmupDuration = d
	return nil
}
