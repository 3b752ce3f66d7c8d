package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// RunInfoFile is the name of the run metadata file in a results folder,
// beside requests.jsonl. Load reads it when present.
const RunInfoFile = "run.json"

// RunInfo is what the load generator knows about a run that the records do
// not say: how it was driven and how far its own measurements can be
// trusted. bench attaches it with Collector.SetRun and writes it with
// WriteRunInfo; every field is optional.
type RunInfo struct {
	Label  string `json:"label,omitempty"`
	Target string `json:"target,omitempty"` // base URL, "embedded", or the simulated deployment
	// Simulated marks a run of tokentrace simulate: its records come from
	// the engine on a virtual clock, not from a server.
	Simulated bool   `json:"simulated,omitempty"`
	Model     string `json:"model,omitempty"`
	// Mode is how requests were scheduled: "open" (arrival rate) or "closed" (concurrency).
	Mode string `json:"mode,omitempty"`
	// Duration is the configured run length (the measured span is in the summary).
	Duration time.Duration `json:"duration_ns,omitempty"`
	// OfferedRate is the configured arrival rate in requests per second (open loop).
	OfferedRate float64 `json:"offered_rps,omitempty"`
	// Concurrency is the configured number of workers (closed loop) or in-flight cap.
	Concurrency int `json:"concurrency,omitempty"`
	// OverheadFloor is the client's own latency measured against a null
	// server: the smallest TTFT this client can observe.
	OverheadFloor time.Duration `json:"overhead_floor_ns,omitempty"`
	// Warnings are the load generator's doubts about its own run (schedule
	// lag, CPU saturation, dropped sends), shown in the report as they are.
	Warnings []string `json:"warnings,omitempty"`
	// Points describes a sweep: one entry per Record.Phase value.
	Points []SweepPoint `json:"points,omitempty"`
	// Samples are the server's scraped metrics over the run, if any.
	Samples []ServerSample `json:"samples,omitempty"`
}

// SweepPoint is one step of a sweep: the records whose Phase equals Phase.
type SweepPoint struct {
	Phase       string        `json:"phase"`
	OfferedRate float64       `json:"offered_rps,omitempty"`
	Concurrency int           `json:"concurrency,omitempty"`
	Duration    time.Duration `json:"duration_ns,omitempty"`
}

// ServerSample is one scrape of the server's metrics: requests running and
// waiting in its scheduler at an instant (nanoseconds since the run start).
type ServerSample struct {
	AtNS    int64   `json:"at_ns"`
	Running float64 `json:"running"`
	Waiting float64 `json:"waiting"`
	// KVCacheUsage is the fraction of KV-cache blocks in use, 0..1, if known.
	KVCacheUsage float64 `json:"kv_cache_usage,omitempty"`
}

// WriteRunInfo writes info to dir/run.json.
func WriteRunInfo(dir string, info RunInfo) error {
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return fmt.Errorf("run info: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, RunInfoFile), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("run info: %w", err)
	}
	return nil
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
