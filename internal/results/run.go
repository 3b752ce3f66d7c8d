package results

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// RunInfo is what the load generator knows about a run that the records do
// not say: how it was driven and how far its own measurements can be
// trusted. bench and simulate write it with WriteRunInfo and report reads it
// with ReadRunInfo; every field is optional.
type RunInfo struct {
	Label  string `json:"label,omitempty"`
	Target string `json:"target,omitempty"` // base URL, "embedded", or the simulated deployment
	// Simulated marks a run of tokentrace simulate: its records come from
	// the engine on a virtual clock, not from a server.
	Simulated bool `json:"simulated,omitempty"`
	// EngineFamily is the serving engine a simulated run's engine
	// simulates (simulate --engine, or bench --sim-engine for the embedded
	// engine: vllm, sglang, trtllm, llamacpp, ollama), so that its report speaks
	// that engine's settings; empty: vLLM's.
	EngineFamily string `json:"engine_family,omitempty"`
	Model        string `json:"model,omitempty"`
	// Mode is how requests were scheduled: "open" (arrival rate) or "closed" (concurrency).
	Mode string `json:"mode,omitempty"`
	// Duration is the configured run length (the measured span is in the summary).
	Duration time.Duration `json:"duration_ns,omitempty"`
	// OfferedRate is the configured arrival rate in requests per second (open loop).
	OfferedRate float64 `json:"offered_rps,omitempty"`
	// Concurrency is the configured number of workers (closed loop) or in-flight cap.
	Concurrency int `json:"concurrency,omitempty"`
	// RampUp is a closed loop's ramp-up as --ramp-up spells it: a span or
	// "first-token"; empty when the workers started together.
	RampUp string `json:"ramp_up,omitempty"`
	// Planned is how many measured requests the run was to send (0: the
	// run was bounded by its duration, or the number is not known); a
	// results folder holding fewer records was cut short.
	Planned int `json:"planned_requests,omitempty"`
	// Interrupted says the run was stopped before its end (a signal, a
	// cancelled context); its records are the requests that finished.
	Interrupted bool `json:"interrupted,omitempty"`
	// OverheadFloor is the client's own latency measured against a null
	// server: the smallest TTFT this client can observe.
	OverheadFloor time.Duration `json:"overhead_floor_ns,omitempty"`
	// Warnings are the load generator's doubts about its own run (schedule
	// lag, CPU saturation, dropped sends), shown in the report as they are;
	// a simulation's also say where it left the twin's envelope (those
	// start with EnvelopeWarning).
	Warnings []string `json:"warnings,omitempty"`
	// Points describes a sweep: one entry per Record.Phase value.
	Points []SweepPoint `json:"points,omitempty"`
	// Samples are the server's scraped metrics over the run, if any.
	Samples []ServerSample `json:"samples,omitempty"`
	// Server says what the target's /metrics held (or why there are no
	// samples): its engine, the figures it exposes and its configuration.
	Server *ServerInfo `json:"server,omitempty"`
	// Shard says which share of a sharded run this is (bench --shard).
	Shard *ShardInfo `json:"shard,omitempty"`
}

// ServerInfo is what the target's Prometheus /metrics told bench about the
// server over a run (internal/scrape reads it).
type ServerInfo struct {
	// Engine is the engine its metric names are: vllm, sglang, tgi,
	// llamacpp or tokentrace (serve); empty when none is known.
	Engine string `json:"engine,omitempty"`
	// Series lists the figures the samples hold: running, waiting,
	// kv_cache_usage, preemptions, prefix_cache (queries and hits),
	// prefix_hit_rate, tokens (prompt and generated), engine_time (prompt
	// and generation seconds). A figure not listed is unknown, not zero.
	Series []string `json:"series,omitempty"`
	// Config is the configuration the server exposes, by its engine's
	// setting names (vLLM's cache_config_info labels such as
	// enable_prefix_caching and block_size; serve's scheduler settings
	// enable_chunked_prefill, max_num_batched_tokens, max_num_seqs).
	Config map[string]string `json:"config,omitempty"`
	// TokenCounters names the counters the samples' token figures came
	// from: prompt and generated tokens, then (llama.cpp) prompt and
	// generation seconds (scrape.Engine.TokenCounters).
	TokenCounters []string `json:"token_counters,omitempty"`
	// Error says why there are no samples (no /metrics, not readable).
	Error string `json:"error,omitempty"`
	// Via is the URL the samples were read from when it is not the
	// target's /metrics: a tokentrace gateway's /upstream/metrics (its
	// engines' own, summed over its replicas).
	Via string `json:"via,omitempty"`
}

// ShardInfo is one share of a workload that several load generators split
// (bench --shard INDEX/COUNT): which share, which workload, and where its
// clock's zero lies, so that the shards' records can be set on one clock.
type ShardInfo struct {
	Index int `json:"index"`
	Count int `json:"count"`
	// Workload identifies the workload the shards split (a hash of the
	// settings that decide the requests and their schedule, seed
	// included): the shards of one run carry the same.
	Workload string `json:"workload"`
	// StartUnixNS is the instant the records' instants count from, on this
	// generator's wall clock (nanoseconds since the Unix epoch); StartAt
	// the agreed start instant it was given, if any.
	StartUnixNS int64     `json:"start_unix_ns"`
	StartAt     time.Time `json:"start_at,omitzero"`
	// Host is the machine's name: shards on one host share its clock.
	Host string `json:"host,omitempty"`
	// ClockOffsetNS is the reference clock (the target's, read from its
	// Date header) minus this host's wall clock, within
	// ± ClockUncertaintyNS; ClockError says why it was not measured.
	ClockOffsetNS      int64  `json:"clock_offset_ns,omitempty"`
	ClockUncertaintyNS int64  `json:"clock_uncertainty_ns,omitempty"`
	ClockError         string `json:"clock_error,omitempty"`
	// ShiftNS is set by report when it merges shards: what it added to
	// this shard's instants to put them on the common clock.
	ShiftNS int64 `json:"shift_ns,omitempty"`
}

// SweepPoint is one step of a sweep: the records whose Phase equals Phase.
type SweepPoint struct {
	Phase       string        `json:"phase"`
	OfferedRate float64       `json:"offered_rps,omitempty"`
	Concurrency int           `json:"concurrency,omitempty"`
	Duration    time.Duration `json:"duration_ns,omitempty"`
	// BeforeCell says what was done to the server before the step
	// (bench --between-cells: a prefix-cache reset, a hook);
	// BeforeCellWarning what of it failed.
	BeforeCell        string `json:"before_cell,omitempty"`
	BeforeCellWarning string `json:"before_cell_warning,omitempty"`
}

// ServerSample is one scrape of the server's metrics at an instant
// (nanoseconds since the run start, the records' clock): requests running
// and waiting in its scheduler, and the cache figures. Counters are
// cumulative since the server started; ServerInfo.Series says which of the
// figures the server exposes.
type ServerSample struct {
	AtNS    int64   `json:"at_ns"`
	Running float64 `json:"running"`
	Waiting float64 `json:"waiting"`
	// KVCacheUsage is the fraction of KV-cache blocks in use, 0..1, if known.
	KVCacheUsage float64 `json:"kv_cache_usage,omitempty"`
	// Preemptions counts requests preempted (SGLang: retracted).
	Preemptions float64 `json:"preemptions,omitempty"`
	// PrefixQueries and PrefixHits count prompt tokens looked up in and
	// served from the prefix cache.
	PrefixQueries float64 `json:"prefix_cache_queries,omitempty"`
	PrefixHits    float64 `json:"prefix_cache_hits,omitempty"`
	// PrefixHitRate is the hit rate an engine gives instead of counters.
	PrefixHitRate float64 `json:"prefix_hit_rate,omitempty"`
	// PromptTokens and GenerationTokens count the prompt tokens the
	// engine computed and the tokens it generated; PromptSeconds and
	// GenerationSeconds its time on them, summed over requests
	// (llama.cpp's llamacpp:prompt_seconds_total and
	// tokens_predicted_seconds_total).
	PromptTokens      float64 `json:"prompt_tokens,omitempty"`
	GenerationTokens  float64 `json:"generation_tokens,omitempty"`
	PromptSeconds     float64 `json:"prompt_seconds,omitempty"`
	GenerationSeconds float64 `json:"generation_seconds,omitempty"`
}

// WriteRunInfo writes info to dir/run.json.
func WriteRunInfo(dir string, info RunInfo) error {
	return writeJSON(filepath.Join(dir, RunInfoFile), info)
}

// ReadRunInfo reads dir/run.json; ok is false when there is none.
func ReadRunInfo(dir string) (info RunInfo, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, RunInfoFile))
	if errors.Is(err, fs.ErrNotExist) {
		return RunInfo{}, false, nil
	}
	if err != nil {
		return RunInfo{}, false, fmt.Errorf("run info: %w", err)
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return RunInfo{}, false, fmt.Errorf("%s: %w", filepath.Join(dir, RunInfoFile), err)
	}
	return info, true, nil
}

// EnvelopeWarning starts a simulation's warning that the run lies outside
// what the twin's constants were fitted on (engine.Envelope).
const EnvelopeWarning = "outside the twin's envelope: "

// IsEnvelopeWarning reports whether a run warning is the twin's envelope
// flag rather than the load generator's doubt.
func IsEnvelopeWarning(w string) bool { return strings.HasPrefix(w, EnvelopeWarning) }
