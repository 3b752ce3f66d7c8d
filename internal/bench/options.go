package bench

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/agent"
	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/live"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// Options are `tokentrace bench`'s settings as a user gives them (the
// command line is internal/cli's): the target, the workload, sweeps and
// SLOs, and where results go. Config turns them into a checked Config, or
// a *field.Error naming the setting that is wrong (the snake_case names in
// the comments).
type Options struct {
	URL             string        // url: base URL; empty: the embedded engine
	Endpoint        string        // endpoint: chat, completions, responses, messages, ollama or sglang
	Model           string        // model: the name sent; empty: the first of GET /v1/models
	APIKey          string        // api_key; empty: $OPENAI_API_KEY
	Headers         []string      // header: "Name: value"
	Stream          bool          // stream
	IgnoreEOS       bool          // ignore_eos
	MinTokens       bool          // min_tokens
	ContinuousUsage bool          // continuous_usage
	ServerMetrics   string        // server_metrics: auto, off, vllm or tokentrace
	ReturnMetrics   bool          // return_metrics: former spelling of server_metrics tokentrace
	Timeout         time.Duration // timeout: per request, without a byte
	PromptTokenizer string        // prompt_tokenizer: auto, server or builtin

	Workload workload.Options
	// The tool endpoint of agent sessions (Workload.Agent).
	ToolURL     string        // tool_url: empty: the built-in tool simulator
	ToolTimeout time.Duration // tool_timeout: per tool call

	Sweep        string        // sweep: rates, concurrencies or auto
	SweepMinSpan time.Duration // sweep_min_span
	// between_cells: reset (the server's prefix cache) or none;
	// between_cells_cmd: a shell command run before each sweep cell.
	BetweenCells, BetweenCellsCmd string
	SLO                           string // slo: latency.ParseSLOs

	Shard        string // shard: INDEX/COUNT, this generator's share of the workload
	ShardStartAt string // shard_start_at: RFC 3339 instant all shards start at

	OutputDir      string        // output_dir: results folder; empty: DefaultOutDir
	NoCalibration  bool          // no_calibration
	Grace          time.Duration // grace: after a stop
	ScrapeInterval time.Duration // scrape_interval: the target's /metrics during the run; negative: start and end only

	// live: where to serve the live page ("" none; a host:port);
	// live_window: the sliding window of the page and the table;
	// progress: the terminal view, table, plain or off ("" the caller's
	// default).
	Live       string
	LiveWindow time.Duration
	Progress   string
}

// DefaultOptions are bench's defaults.
func DefaultOptions() Options {
	return Options{
		Endpoint: EndpointChat, Stream: true, ServerMetrics: ServerMetricsAuto, Timeout: 5 * time.Minute, Workload: workload.DefaultOptions(),
		PromptTokenizer: PromptTokenizerAuto,
		ToolTimeout:     agent.DefaultTimeout,
		Grace:           5 * time.Second, SweepMinSpan: 10 * time.Second, ScrapeInterval: DefaultScrapeInterval,
		BetweenCells: BetweenCellsReset,
	}
}

// Config checks the options and builds the run's configuration. given
// reports whether the user set a field, by its snake_case name (defaults
// differ for the embedded engine); now names the default results folder.
func (o Options) Config(given func(field string) bool, now time.Time) (Config, error) {
	var cfg Config
	t, err := o.target(given)
	if err != nil {
		return cfg, err
	}
	cfg.Target = t
	if o.Workload.Trace != "" && given("sweep") {
		return cfg, field.Errorf("trace", "sets the arrival times; leave out {sweep} (use {time_scale})")
	}
	src, l, err := o.Workload.Build(t.api().Chat(), given)
	if err != nil {
		return cfg, err
	}
	cfg.Workload, cfg.Load = src, l
	if cfg.Tools, err = o.tools(given); err != nil {
		return cfg, err
	}
	slos, err := latency.ParseSLOs(o.SLO)
	if err != nil {
		return cfg, field.Wrap("slo", err)
	}
	cfg.SLOs = slos
	switch o.BetweenCells {
	case "", BetweenCellsReset, BetweenCellsNone:
		cfg.BetweenCells, cfg.BetweenCellsCmd = o.BetweenCells, o.BetweenCellsCmd
	default:
		return cfg, field.Invalid("between_cells", o.BetweenCells, "must be reset or none")
	}
	if o.Sweep != "" {
		kind := "rate"
		if !given("rate") && given("concurrency") {
			kind = "concurrency"
		}
		sw, err := ParseSweep(o.Sweep, kind)
		if err != nil {
			return cfg, field.Wrap("sweep", err)
		}
		if o.SweepMinSpan < 0 {
			return cfg, field.Invalid("sweep_min_span", o.SweepMinSpan, "must not be negative")
		}
		sw.MinSpan = o.SweepMinSpan
		if err := sw.Validate(slos); err != nil {
			return cfg, field.Wrap("sweep", err)
		}
		cfg.Sweep = sw
	} else if err := l.Validate(); err != nil {
		return cfg, err
	}
	if err := o.shard(&cfg, given, now); err != nil {
		return cfg, err
	}
	if o.Grace < 0 {
		return cfg, field.Invalid("grace", o.Grace, "must not be negative")
	}
	cfg.Grace = o.Grace
	switch pt := strings.ToLower(strings.TrimSpace(o.PromptTokenizer)); pt {
	case "", PromptTokenizerAuto, PromptTokenizerServer, PromptTokenizerBuiltin:
		cfg.PromptTokenizer = pt
	default:
		return cfg, field.Invalid("prompt_tokenizer", o.PromptTokenizer, "want auto, server or builtin")
	}
	if cfg.PromptTokenizer == PromptTokenizerServer && strings.TrimSpace(o.URL) == "" {
		return cfg, field.Errorf("prompt_tokenizer", "server needs a {url}: the embedded engine's tokenizer is tokentrace's own")
	}
	cfg.ScrapeInterval = o.ScrapeInterval
	if err := o.liveView(&cfg); err != nil {
		return cfg, err
	}
	cfg.SkipCalibration = o.NoCalibration
	cfg.OutDir = o.OutputDir
	if cfg.OutDir == "" {
		cfg.OutDir = DefaultOutDir(now)
	}
	return cfg, nil
}

// liveView checks the live page's address, its window and the terminal
// view (the page's listener is the caller's to open).
func (o Options) liveView(cfg *Config) error {
	switch o.Progress {
	case "", live.ProgressTable, live.ProgressPlain, live.ProgressOff:
		cfg.ProgressView = o.Progress
	default:
		return field.Invalid("progress", o.Progress, "want table, plain or off")
	}
	if o.LiveWindow != 0 && (o.LiveWindow < time.Second || o.LiveWindow > 10*time.Minute) {
		return field.Invalid("live_window", o.LiveWindow, "must lie between 1s and 10m")
	}
	cfg.LiveWindow = o.LiveWindow
	if o.Live != "" {
		if _, _, err := net.SplitHostPort(o.Live); err != nil {
			return field.Invalid("live", o.Live, "want host:port, e.g. "+live.DefaultAddr)
		}
	}
	return nil
}

// target checks where requests go and how they are sent.
func (o Options) target(given func(string) bool) (Target, error) {
	embedded := strings.TrimSpace(o.URL) == ""
	t := Target{BaseURL: strings.TrimSpace(o.URL), Endpoint: strings.ToLower(o.Endpoint), Model: o.Model,
		APIKey: o.APIKey, Stream: o.Stream, IgnoreEOS: o.IgnoreEOS, MinTokens: o.MinTokens,
		ContinuousUsage: o.ContinuousUsage, Timeout: o.Timeout}
	switch m := strings.ToLower(strings.TrimSpace(o.ServerMetrics)); m {
	case "", ServerMetricsAuto, ServerMetricsOff, ServerMetricsVLLM, ServerMetricsTokentrace:
		t.ServerMetrics = m
	default:
		return t, field.Invalid("server_metrics", o.ServerMetrics, "want auto, off, vllm or tokentrace")
	}
	if o.ReturnMetrics {
		t.ServerMetrics = ServerMetricsTokentrace
	}
	if t.APIKey == "" {
		t.APIKey = os.Getenv("OPENAI_API_KEY")
	}
	if embedded {
		if !given("ignore_eos") {
			t.IgnoreEOS = true
		}
		if !given("continuous_usage") {
			t.ContinuousUsage = true
		}
	}
	if err := checkEndpoint(t.Endpoint); err != nil {
		return t, field.Invalid("endpoint", o.Endpoint, "%s", err.Error())
	}
	if !embedded {
		if _, err := t.apiURL(""); err != nil {
			return t, field.Wrap("url", err)
		}
	}
	if o.Timeout <= 0 {
		return t, field.Invalid("timeout", o.Timeout, "must be positive")
	}
	for _, h := range o.Headers {
		k, v, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return t, field.Invalid("header", h, `want "Name: value"`)
		}
		if t.Headers == nil {
			t.Headers = http.Header{}
		}
		t.Headers.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	return t, nil
}

// tools checks the tool endpoint of agent sessions.
func (o Options) tools(given func(string) bool) (*ToolTarget, error) {
	if !o.Workload.Agent() {
		if given("tool_url") || given("tool_timeout") {
			return nil, field.Errorf("tool_url", "is for agent sessions: give {agent_steps} or {agent_sessions}")
		}
		return nil, nil
	}
	if o.ToolTimeout <= 0 {
		return nil, field.Invalid("tool_timeout", o.ToolTimeout, "must be positive")
	}
	u := strings.TrimSpace(o.ToolURL)
	if u != "" {
		if err := agent.CheckURL(u); err != nil {
			return nil, field.Wrap("tool_url", err)
		}
	}
	return &ToolTarget{URL: u, Timeout: o.ToolTimeout}, nil
}

// shard checks the share of the workload this generator sends and when it
// starts, and names the workload for the merge.
func (o Options) shard(cfg *Config, given func(string) bool, now time.Time) error {
	sh, err := workload.ParseShard(o.Shard)
	if err != nil {
		return field.Wrap("shard", err)
	}
	if o.ShardStartAt != "" {
		at, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(o.ShardStartAt))
		if err != nil {
			return field.Invalid("shard_start_at", o.ShardStartAt, "want an RFC 3339 instant, e.g. 2025-06-01T12:00:00Z")
		}
		if !at.After(now) {
			return field.Invalid("shard_start_at", o.ShardStartAt, "is %s in the past: give an instant every shard can still reach", now.Sub(at).Round(time.Millisecond))
		}
		cfg.StartAt = at
	}
	if !sh.Sharded() {
		return nil
	}
	if cfg.Sweep != nil {
		return field.Errorf("shard", "cannot split a {sweep}: its points depend on the results so far")
	}
	if cfg.Load, err = sh.Split(cfg.Load); err != nil {
		return err
	}
	cfg.Shard = sh
	cfg.WorkloadID = o.workloadID(cfg.Target, sh.Count)
	return nil
}

// workloadID names the workload: a hash of the settings that decide the
// requests and their schedule (the workload's, seed included, and how they
// are sent). The shards of one run share it; the merge checks it.
func (o Options) workloadID(t Target, shards int) string {
	b, _ := json.Marshal(struct {
		W                                             workload.Options
		Endpoint, Model                               string
		Stream, IgnoreEOS, MinTokens, ContinuousUsage bool
		ServerMetrics                                 string
		Shards                                        int
	}{o.Workload, t.Endpoint, o.Model, t.Stream, t.IgnoreEOS, t.MinTokens, t.ContinuousUsage, t.ServerMetrics, shards})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
