package results

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// ErrNoRecords is returned (wrapped) when a path holds no records file, or
// the records files hold no record at all.
var ErrNoRecords = errors.New("no request records")

// ConfigVersion is the config.json schema Config writes: 2 adds the typed
// run (Run) to version 1's flags by name (a file without "version" is
// version 1).
const ConfigVersion = 2

// Config is a run's config.json: its schema version, the configuration as
// given (its flags by name, secrets masked: what a reader compares), the
// run's configuration typed (what the twin is rebuilt from: the writer's
// type, simulate.RunConfig) and, for a run against a server, the target
// with its credentials masked.
type Config struct {
	Version int `json:"version,omitempty"`
	Config  any `json:"config"`
	Run     any `json:"run,omitempty"`
	Target  any `json:"target,omitempty"`
}

// WriteCommand writes the run's exact command line to dir/command.txt.
func WriteCommand(dir, command string) error {
	return writeText(filepath.Join(dir, CommandFile), command+"\n")
}

// WriteConfig writes dir/config.json, at ConfigVersion when it holds a
// typed run.
func WriteConfig(dir string, c Config) error {
	if c.Run != nil && c.Version == 0 {
		c.Version = ConfigVersion
	}
	return writeJSON(filepath.Join(dir, ConfigFile), c)
}

// WriteSummary writes the run's summary, indented, to dir/summary.json.
func WriteSummary(dir string, summary any) error {
	return writeJSON(filepath.Join(dir, SummaryFile), summary)
}

// ClientLateness is how late the load generator's own clock ran in a
// run, as its summary.json records it (client.timekeeping: the ticker's
// wake-ups while a request was in flight, each woken − due): a request's
// recorded instants can be late by as much.
type ClientLateness struct {
	P50MS float64 `json:"tick_late_p50_ms"`
	P99MS float64 `json:"tick_late_p99_ms"`
	// Ticks woke every PeriodMS while requests were in flight; StallMS
	// is the lateness summed over the wake-ups past the stall threshold.
	Ticks    int64   `json:"ticks"`
	PeriodMS float64 `json:"tick_period_ms"`
	StallMS  float64 `json:"stall_total_ms"`
}

// StallShare is the share of the time requests were in flight that the
// load generator could not run: StallMS ÷ (Ticks·PeriodMS + StallMS); 0
// when it recorded none.
func (l ClientLateness) StallShare() float64 {
	if d := float64(l.Ticks)*l.PeriodMS + l.StallMS; d > 0 {
		return l.StallMS / d
	}
	return 0
}

// ReadClientLateness reads dir/summary.json's client.timekeeping; ok is
// false when the folder has none (a simulated run, another tool's, an
// older bench's, or a file that does not parse).
func ReadClientLateness(dir string) (l ClientLateness, ok bool) {
	b, err := os.ReadFile(filepath.Join(dir, SummaryFile))
	if err != nil {
		return l, false
	}
	var s struct {
		Client struct {
			Timekeeping *ClientLateness `json:"timekeeping"`
		} `json:"client"`
	}
	if json.Unmarshal(b, &s) != nil || s.Client.Timekeeping == nil {
		return l, false
	}
	return *s.Client.Timekeeping, true
}

// CreateRecords creates dir/requests.jsonl; an existing file is an error.
func CreateRecords(dir string) (*RecordWriter, error) {
	return NewRecordWriter(filepath.Join(dir, RequestsFile))
}

// CreateSteps creates dir/steps.jsonl, the simulator's per-step records.
func CreateSteps(dir string) (*os.File, error) {
	f, err := createFile(filepath.Join(dir, StepsFile))
	if err != nil {
		return nil, fmt.Errorf("steps file: %w", err)
	}
	return f, nil
}

// ReadCommand reads dir/command.txt; "" when there is none.
func ReadCommand(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, CommandFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return string(b), err
}

// ReadConfig reads the flags as given from dir/config.json: nil when there
// is none, or when it does not parse as a map of names to values (a folder
// written by another tool).
func ReadConfig(dir string) (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var c struct {
		Config map[string]string `json:"config"`
	}
	if json.Unmarshal(b, &c) != nil {
		return nil, nil
	}
	return c.Config, nil
}

// ReadTypedConfig decodes the typed run of dir/config.json into run:
// false when the folder has no config.json, one of version 1 (flags only,
// which the caller adapts) or one that is not JSON (ReadConfig's nil); an
// error when a version 2 run does not parse, or the version is newer.
func ReadTypedConfig(dir string, run any) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var c struct {
		Version int             `json:"version"`
		Run     json.RawMessage `json:"run"`
	}
	if json.Unmarshal(b, &c) != nil {
		return false, nil // not ours (ReadConfig's rule)
	}
	if c.Version < 2 || len(c.Run) == 0 {
		return false, nil
	}
	if c.Version > ConfigVersion {
		return false, fmt.Errorf("%s: version %d is newer than this build reads (%d)", ConfigPath(dir), c.Version, ConfigVersion)
	}
	if err := json.Unmarshal(c.Run, run); err != nil {
		return false, fmt.Errorf("%s: run: %w", ConfigPath(dir), err)
	}
	return true, nil
}

// ConfigPath names dir's config.json (for messages about it).
func ConfigPath(dir string) string { return filepath.Join(dir, ConfigFile) }

// RecordsPath is the records file of the results folder dir.
func RecordsPath(dir string) string { return filepath.Join(dir, RequestsFile) }

// FindRecords turns a path into the records files it stands for: a
// records file itself, a results folder's requests.jsonl, or those of its
// subfolders (a sweep), in name order. A folder with none is an error
// wrapping ErrNoRecords.
func FindRecords(p string) ([]string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("input: %w", err)
	}
	if !st.IsDir() {
		return []string{p}, nil
	}
	direct := RecordsPath(p)
	if _, err := os.Stat(direct); err == nil {
		return []string{direct}, nil
	}
	sub, _ := filepath.Glob(filepath.Join(p, "*", RequestsFile))
	if len(sub) > 0 {
		slices.Sort(sub)
		return sub, nil
	}
	return nil, fmt.Errorf("%s: %w: no %s in it or in its subfolders (is it a bench results folder?)",
		p, ErrNoRecords, RequestsFile)
}

// SourceName names a records file by its folder, or by the file when it is
// not called requests.jsonl.
func SourceName(f string) string {
	if filepath.Base(f) == RequestsFile {
		return filepath.Dir(f)
	}
	return f
}

// writeJSON writes v, indented, to path.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return writeText(path, string(append(b, '\n')))
}

// writeText writes s to path, a file it creates (createFile).
func writeText(path, s string) error {
	f, err := createFile(path)
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return nil
}

// createFile creates the results file path for writing, exclusively: a
// file already there, or a symbolic link (even one to nowhere), is an
// error, never followed or overwritten (O_EXCL).
func createFile(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
}
