package simulate

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/route"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// Options are `tokentrace simulate`'s settings as a user gives them (the
// command line is internal/cli's): the engine's and the workload's, as
// serve and bench name them, and the deployment around the engines, as the
// gateway's configuration names it. Config turns them into a Config and an
// Output, or a *field.Error naming the setting that is wrong (the
// snake_case names in the comments).
type Options struct {
	Engine   engine.Options   `json:"engine"`
	Workload workload.Options `json:"workload"`

	// Like (like) is a results folder whose workload is replayed instead
	// of Workload's: its requests' served lengths in its own shape, with
	// its client's measured transport (LikeRun).
	Like string `json:"like"`

	Endpoint        string `json:"endpoint"`          // endpoint: chat or completions (how prompts are built)
	IgnoreEOS       bool   `json:"ignore_eos"`        // ignore_eos: answers run to max_tokens
	ServedModelName string `json:"served_model_name"` // served_model_name: the model named in the records
	QueueFullStatus int    `json:"queue_full_status"` // queue_full_status: 429 or 503 for --max-waiting

	Replicas int `json:"replicas"` // replicas (a disaggregated deployment's decode replicas)
	// PrefillReplicas (prefill_replicas), when positive, disaggregates the
	// deployment: that many prefill replicas in front of the Replicas,
	// the KV cache pulled over KVLink (kv_link: perfmodel.LookupLink;
	// empty: perfmodel.DefaultLink).
	PrefillReplicas int    `json:"prefill_replicas"`
	KVLink          string `json:"kv_link"`
	// PrefillGPU (prefill_gpu) and PrefillTensorParallelSize
	// (prefill_tensor_parallel_size) run the prefill pool on another GPU
	// or at another TP than Engine's (its other settings kept; a profile,
	// fitted on one GPU and TP, left out when either differs); empty and
	// 0: Engine's.
	PrefillGPU                string `json:"prefill_gpu"`
	PrefillTensorParallelSize int    `json:"prefill_tensor_parallel_size"`

	Force          bool          `json:"force"`           // force: run over Preflight's bounds
	Balancer       string        `json:"balancer"`        // balancer: route.Names
	LengthPools    string        `json:"length_pools"`    // length_pools: ParsePools
	PrefixBytes    int           `json:"prefix_bytes"`    // prefix_bytes: text hashed by prefix_affinity
	ScrapeInterval time.Duration `json:"scrape_interval"` // scrape_interval
	NetworkLatency time.Duration `json:"network_latency"` // network_latency: one way, client–router
	// FrontEnd (front_end) is each replica's front end per request
	// (Config.FrontEnd); not given: the engine family's release's
	// (engine.Options.FrontEnd; none without --engine or on a
	// disaggregated deployment).
	FrontEnd time.Duration `json:"front_end"`

	Queue        QueueOptions  `json:"queue"`
	DeadlineTTFT time.Duration `json:"deadline_ttft"` // deadline_ttft
	EarlyReject  bool          `json:"early_reject"`  // early_reject

	SLO       string `json:"slo"`        // slo: latency.ParseSLOs
	OutputDir string `json:"output_dir"` // output_dir; empty: results.DefaultDir
	Steps     bool   `json:"steps"`      // steps: write steps.jsonl
}

// FrontEndOf is the front end per request the run adds (Config.FrontEnd):
// the one given (front_end), or the engine family's release's on a
// unified deployment.
func (o Options) FrontEndOf(given func(field string) bool) (time.Duration, error) {
	if given("front_end") {
		return o.FrontEnd, nil
	}
	if o.PrefillReplicas != 0 {
		return 0, nil
	}
	return o.Engine.FrontEnd()
}

// QueueOptions are the admission queue's settings, as the gateway's
// queue: block names them; the queue is on when Concurrency is set.
type QueueOptions struct {
	MaxSize        int           `json:"max_size"`        // queue_max_size
	Concurrency    int           `json:"concurrency"`     // queue_concurrency
	MinConcurrency int           `json:"min_concurrency"` // queue_min_concurrency
	MaxConcurrency int           `json:"max_concurrency"` // queue_max_concurrency
	Adaptive       string        `json:"adaptive"`        // queue_adaptive: "" (a fixed limit) or gradient
	TargetTTFT     time.Duration `json:"target_ttft"`     // queue_target_ttft: the adaptive limit's cap on upstream TTFT
}

// AdaptiveGradient is the adaptive limit's one controller, as the
// gateway's queue.adaptive names it.
const AdaptiveGradient = "gradient"

// Endpoints, as bench names them.
const (
	EndpointChat        = "chat"
	EndpointCompletions = "completions"
)

// SampleInterval is how often the replicas' state is sampled into run.json.
const SampleInterval = time.Second

// DefaultOptions are simulate's defaults: serve's engine, bench's workload,
// one replica, answers run to max_tokens as bench asks of the embedded
// engine.
func DefaultOptions() Options {
	return Options{
		Engine: engine.DefaultOptions(), Workload: workload.DefaultOptions(),
		Endpoint: EndpointChat, IgnoreEOS: true, QueueFullStatus: 429,
		Replicas: 1, Balancer: route.NameLeastOutstanding, PrefixBytes: DefaultPrefixBytes,
	}
}

// Config checks the options and builds the simulation and where its
// results go. given reports whether the user set a field, by its
// snake_case name; now names the default results folder.
func (o Options) Config(given func(field string) bool, now time.Time) (Config, Output, error) {
	var cfg Config
	var out Output
	ec, _, err := o.Engine.Config()
	if err != nil {
		return cfg, out, err
	}
	endpoint := strings.ToLower(o.Endpoint)
	if endpoint != EndpointChat && endpoint != EndpointCompletions {
		return cfg, out, field.Invalid("endpoint", o.Endpoint, "want chat or completions")
	}
	src, l, network, sample, ignoreEOS, err := o.workload(endpoint == EndpointChat, given)
	if err != nil {
		return cfg, out, err
	}
	if err := l.Validate(); err != nil {
		return cfg, out, err
	}
	pools, err := ParsePools(o.LengthPools)
	if err != nil {
		return cfg, out, field.Wrap("length_pools", err)
	}
	replicas := o.Replicas
	switch {
	case len(pools) > 0 && !given("replicas"):
		replicas = 0 // the pools' total
	case replicas < 1:
		return cfg, out, field.Invalid("replicas", o.Replicas, "must be at least 1")
	}
	model := o.ServedModelName
	if model == "" {
		model = ec.Model
	}
	cfg = Config{
		Engine: ec, Replicas: replicas, Pools: pools, Balancer: o.Balancer, PrefixBytes: o.PrefixBytes,
		ScrapeInterval: o.ScrapeInterval, Network: network, NetworkSample: sample, NetworkSeed: max(o.Workload.Seed, 1),
		QueueFullStatus: o.QueueFullStatus,
		Workload:        src, Load: l, IgnoreEOS: ignoreEOS, Model: model, Steps: o.Steps,
		SampleInterval: SampleInterval, Force: o.Force,
	}
	if cfg.FrontEnd, err = o.FrontEndOf(given); err != nil {
		return cfg, out, err
	}
	if o.PrefillReplicas != 0 {
		name := o.KVLink
		if name == "" {
			name = perfmodel.DefaultLink
		}
		if cfg.Engine.KVLink, err = perfmodel.LookupLink(name); err != nil {
			return cfg, out, field.Invalid("kv_link", o.KVLink, "%w", err)
		}
		cfg.PrefillReplicas = o.PrefillReplicas
	}
	if cfg.PrefillEngine, err = o.prefillEngine(ec); err != nil {
		return cfg, out, err
	}
	if err := o.admission(&cfg); err != nil {
		return cfg, out, err
	}
	slos, err := latency.ParseSLOs(o.SLO)
	if err != nil {
		return cfg, out, field.Wrap("slo", err)
	}
	env, err := o.Engine.Envelope()
	if err != nil {
		return cfg, out, err
	}
	out = Output{Dir: o.OutputDir, SLOs: slos, Describe: ec.Describe(), Envelope: &env, EngineFamily: o.Engine.Engine}
	if out.Dir == "" {
		out.Dir = results.DefaultDir(now)
	}
	if err := cfg.withDefaults().validate(); err != nil {
		return cfg, out, err
	}
	return cfg, out, nil
}

// likeConflicts are the workload settings a --like replay takes from the
// run instead.
var likeConflicts = []string{"rate", "concurrency", "requests", "duration", "warmup", "trace", "prompts",
	"input_tokens", "output_tokens", "prefix_tokens", "prefix_groups", "turns", "arrival", "agent_steps", "agent_sessions"}

// workload is what to send: the workload flags', or with Like the run's
// (its transport as the network unless network_latency is given — an
// open loop's drawn per request from its measured transports — answers
// running to the lengths it produced).
func (o Options) workload(chat bool, given func(string) bool) (src workload.Source, l workload.Load, network time.Duration, sample []time.Duration, ignoreEOS bool, err error) {
	if o.Like == "" {
		src, l, err := o.Workload.Build(chat, given)
		return src, l, o.NetworkLatency, nil, o.IgnoreEOS, err
	}
	for _, f := range likeConflicts {
		if given(f) {
			return nil, workload.Load{}, 0, nil, false, &field.Error{Field: "like", Err: fmt.Errorf("replays the run's own workload: leave out --%s", strings.ReplaceAll(f, "_", "-"))}
		}
	}
	lk, err := LikeRun(o.Like, chat, max(o.Workload.Seed, 1))
	if err != nil {
		return nil, workload.Load{}, 0, nil, false, field.Invalid("like", o.Like, "%w", err)
	}
	if given("network_latency") {
		return lk.Source, lk.Load, o.NetworkLatency, nil, true, nil
	}
	return lk.Source, lk.Load, lk.Network, lk.NetworkSample, true, nil
}

// admission builds the admission queue's configuration, when it is on.
func (o Options) admission(cfg *Config) error {
	q := o.Queue
	switch {
	case q.MaxSize < 0:
		return field.Invalid("queue_max_size", q.MaxSize, "must not be negative")
	case q.Concurrency < 0:
		return field.Invalid("queue_concurrency", q.Concurrency, "must not be negative")
	case q.MinConcurrency < 0 || q.MaxConcurrency < 0:
		return field.Errorf("queue_min_concurrency", "{queue_min_concurrency} and {queue_max_concurrency} must not be negative")
	case q.TargetTTFT < 0:
		return field.Invalid("queue_target_ttft", q.TargetTTFT, "must not be negative")
	case q.Adaptive != "" && q.Adaptive != AdaptiveGradient:
		return field.Invalid("queue_adaptive", q.Adaptive, "want gradient (or leave it out for a fixed limit)")
	case q.Adaptive != "" && q.Concurrency == 0:
		return field.Errorf("queue_adaptive", "needs {queue_concurrency}, the limit it starts from")
	case o.EarlyReject && o.DeadlineTTFT == 0:
		return field.Errorf("early_reject", "needs {deadline_ttft}")
	case q.Concurrency == 0 && (o.DeadlineTTFT > 0 || q.MaxSize > 0):
		return field.Errorf("queue_concurrency", "the admission queue ({queue_max_size}, {deadline_ttft}) needs a concurrency limit")
	}
	if q.Concurrency == 0 {
		return nil
	}
	l := route.Limits{MaxSize: q.MaxSize, Concurrency: q.Concurrency, MinConcurrency: q.MinConcurrency,
		MaxConcurrency: q.MaxConcurrency, Adaptive: q.Adaptive != "", TargetTTFT: q.TargetTTFT}.WithDefaults()
	if err := l.Validate(); err != nil {
		return field.Wrap("queue_concurrency", err)
	}
	cfg.Admission = &Admission{Limits: l, DeadlineTTFT: o.DeadlineTTFT, EarlyReject: o.EarlyReject}
	return nil
}

// BenchDifferences says how the workload these options simulate differs
// from what `tokentrace bench --url` sends a real server with the same
// workload flags, so that a user comparing the two compares like with
// like (docs/simulate.md, "Same flags as bench"). given reports whether
// the user set a field, by its snake_case name.
func (o Options) BenchDifferences(given func(field string) bool) []string {
	if o.Like != "" {
		lk, err := LikeRun(o.Like, o.Endpoint != EndpointCompletions, max(o.Workload.Seed, 1))
		if err != nil {
			return nil // Config says why
		}
		if len(lk.NetworkSample) > 0 && !given("network_latency") {
			return append(lk.Notes, fmt.Sprintf("simulate draws each request's network from the run's %d measured transports (half each way, seeded by --seed), not their median: an open loop's request meets the step its own transport sets", len(lk.NetworkSample)))
		}
		return lk.Notes
	}
	var out []string
	if o.IgnoreEOS {
		out = append(out, "answers run to max_tokens (ignore_eos, as bench asks of its embedded engine); bench --url sends no ignore_eos unless --ignore-eos is given, and a server then ends answers where its model stops: give bench --ignore-eos, or simulate --ignore-eos=false with --natural-output-tokens")
	} else {
		out = append(out, "answers end where --natural-output-tokens draws ("+o.Engine.NaturalOutputTokens+"), capped by max_tokens; a real server's end where its model stops")
	}
	if o.Workload.Trace == "" && o.Workload.Prompts == "" {
		out = append(out, "prompts are --input-tokens long as serve tokenizes them; a real server counts its own tokens and its chat template's (bench's records keep the served input_tokens): simulate --like RESULTS replays the served lengths")
	}
	if o.NetworkLatency == 0 && !given("network_latency") {
		out = append(out, "the client's transport is 0 (--network-latency): tokens reach the client at their step's end, requests the engine at their send")
	}
	return out
}

// prefillEngine is the prefill pool's engine where PrefillGPU or
// PrefillTensorParallelSize sets another GPU or TP than dec's (nil: the
// decode pool's); the error names the field.
func (o Options) prefillEngine(dec engine.Config) (*engine.Config, error) {
	if o.PrefillGPU == "" && o.PrefillTensorParallelSize == 0 {
		return nil, nil
	}
	name := "prefill_gpu"
	if o.PrefillGPU == "" {
		name = "prefill_tensor_parallel_size"
	}
	switch {
	case o.PrefillReplicas <= 0:
		return nil, field.Errorf(name, "sets the prefill pool's engine: it needs {prefill_replicas}")
	case o.PrefillTensorParallelSize < 0:
		return nil, field.Invalid("prefill_tensor_parallel_size", o.PrefillTensorParallelSize, "must not be negative")
	}
	eo := o.Engine
	eo.GPU = cmp.Or(o.PrefillGPU, eo.GPU)
	eo.TensorParallelSize = cmp.Or(o.PrefillTensorParallelSize, eo.TensorParallelSize)
	if eo.GPU != o.Engine.GPU || eo.TensorParallelSize != o.Engine.TensorParallelSize {
		eo.Profile = ""
	}
	ec, _, err := eo.Config()
	if err != nil {
		return nil, field.Invalid(name, cmp.Or(o.PrefillGPU, fmt.Sprint(o.PrefillTensorParallelSize)), "%w", err)
	}
	if ec.GPU == dec.GPU {
		return nil, nil
	}
	return &ec, nil
}
