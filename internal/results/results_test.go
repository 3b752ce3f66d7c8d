package results

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/latency"
)

func TestRecordsAreOnDiskAsTheyFinish(t *testing.T) {
	path := filepath.Join(t.TempDir(), RequestsFile)
	w, err := NewRecordWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		w.Write(&latency.Record{ID: strings.Repeat("x", i+1)})
	}
	// Not closed, not flushed: a killed process leaves exactly this.
	f, _ := os.Open(path)
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); n++ {
	}
	f.Close()
	if n != 3 {
		t.Errorf("%d lines on disk before Close, want 3", n)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := NewRecordWriter(path); err == nil {
		t.Error("an existing requests file was reopened")
	}
}

func TestCheckRefusesAFolderHoldingARun(t *testing.T) {
	dir := t.TempDir()
	if err := Prepare(filepath.Join(dir, "new", "run")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, RequestsFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := Check(dir)
	var fe *field.Error
	if !errors.As(err, &fe) || fe.Field != "output_dir" || !strings.Contains(err.Error(), "already holds a run") {
		t.Errorf("Check on a folder with %s: %v", RequestsFile, err)
	}
}

// TestRunFilesAreCreatedExclusively: a symbolic link planted in a results
// folder under a name a run writes is refused by Check and never
// followed by the writers (its target keeps its bytes); a file already
// there is not overwritten.
func TestRunFilesAreCreatedExclusively(t *testing.T) {
	for _, name := range []string{SummaryFile, RunInfoFile, CommandFile, ConfigFile, RequestsFile, StepsFile} {
		dir := t.TempDir()
		target := filepath.Join(t.TempDir(), "victim")
		if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
		if err := Check(dir); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: Check = %v, want a refusal naming it", name, err)
		}
		var err error
		switch name {
		case SummaryFile:
			err = WriteSummary(dir, map[string]int{"x": 1})
		case RunInfoFile:
			err = WriteRunInfo(dir, RunInfo{})
		case CommandFile:
			err = WriteCommand(dir, "tokentrace bench")
		case ConfigFile:
			err = WriteConfig(dir, Config{})
		case RequestsFile:
			var w *RecordWriter
			if w, err = CreateRecords(dir); err == nil {
				w.Close()
			}
		case StepsFile:
			var f *os.File
			if f, err = CreateSteps(dir); err == nil {
				f.Close()
			}
		}
		if err == nil {
			t.Errorf("%s: written through a symbolic link", name)
		}
		if b, _ := os.ReadFile(target); string(b) != "keep" {
			t.Errorf("%s: the link's target was overwritten: %q", name, b)
		}
	}
}

// TestReadTypedConfig reads each config.json schema: version 1 (flags
// only) and a file that is not JSON have no typed run; version 2 decodes
// it; a run that does not parse, or a newer version, is an error.
func TestReadTypedConfig(t *testing.T) {
	type run struct {
		Rate float64 `json:"rate"`
	}
	for _, tc := range []struct {
		name, file string
		ok, err    bool
		want       float64
	}{
		{"none", "", false, false, 0},
		{"version 1", `{"config": {"rate": "5"}}`, false, false, 0},
		{"not JSON", `rate=5`, false, false, 0},
		{"version 2", `{"version": 2, "config": {"rate": "5"}, "run": {"rate": 5}}`, true, false, 5},
		{"version 2, bad run", `{"version": 2, "run": {"rate": "five"}}`, false, true, 0},
		{"version 3", `{"version": 3, "run": {"rate": 5}}`, false, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.file != "" {
				if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(tc.file), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var r run
			ok, err := ReadTypedConfig(dir, &r)
			if ok != tc.ok || (err != nil) != tc.err || r.Rate != tc.want {
				t.Errorf("got %v, %v, rate %g; want %v, error %v, rate %g", ok, err, r.Rate, tc.ok, tc.err, tc.want)
			}
		})
	}
}

// TestWriteConfigVersion: a config.json with a typed run is written at
// ConfigVersion and reads back; one without stays version 1.
func TestWriteConfigVersion(t *testing.T) {
	dir := t.TempDir()
	if err := WriteConfig(dir, Config{Config: map[string]string{"rate": "5"}, Run: map[string]float64{"rate": 5}}); err != nil {
		t.Fatal(err)
	}
	var r struct {
		Rate float64 `json:"rate"`
	}
	if ok, err := ReadTypedConfig(dir, &r); !ok || err != nil || r.Rate != 5 {
		t.Fatalf("got %v, %v, %+v", ok, err, r)
	}
	flags, err := ReadConfig(dir)
	if err != nil || flags["rate"] != "5" {
		t.Fatalf("flags %v, %v", flags, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil || !strings.Contains(string(b), `"version": 2`) {
		t.Fatalf("%s, %v", b, err)
	}
}

// FuzzReadTypedConfig: any config.json reads without panicking, a typed
// run found without an error.
func FuzzReadTypedConfig(f *testing.F) {
	f.Add([]byte(`{"config": {"rate": "5"}}`))
	f.Add([]byte(`{"version": 2, "run": {"rate": 5}}`))
	f.Add([]byte(`{"version": 9, "run": []}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ConfigFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
		var run map[string]any
		ok, err := ReadTypedConfig(dir, &run)
		if ok && err != nil {
			t.Fatalf("ok with %v from %q", err, b)
		}
	})
}

// TestRecordLineIsJSONMarshal checks that each line is json.Marshal's
// bytes and a newline, HTML characters escaped as Marshal escapes them.
func TestRecordLineIsJSONMarshal(t *testing.T) {
	path := filepath.Join(t.TempDir(), RequestsFile)
	w, err := NewRecordWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	recs := []*latency.Record{{ID: "a<b>&c", Model: "m", ChunkNS: []int64{1, 2}}, {ID: "z", Error: "\u2028"}}
	var want []byte
	for _, r := range recs {
		w.Write(r)
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		want = append(append(want, b...), '\n')
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if string(got) != string(want) {
		t.Errorf("file\n%s\nwant\n%s", got, want)
	}
}

// A run's clock lateness from its summary.json; none where the summary has
// none or there is no summary.
func TestReadClientLateness(t *testing.T) {
	dir := t.TempDir()
	if _, ok := ReadClientLateness(dir); ok {
		t.Error("no summary.json: lateness found")
	}
	if err := WriteSummary(dir, map[string]any{"client": map[string]any{"timekeeping": map[string]any{
		"ticks": 100, "tick_late_p50_ms": 0.5, "tick_late_p99_ms": 12.5}}}); err != nil {
		t.Fatal(err)
	}
	if l, ok := ReadClientLateness(dir); !ok || l.P50MS != 0.5 || l.P99MS != 12.5 || l.StallShare() != 0 {
		t.Errorf("lateness %+v (%v), want 0.5 and 12.5 ms, no stall", l, ok)
	}
	// 300 ticks of 5 ms and 500 ms of stalls: 500 ÷ (1,500 + 500) = 25 %.
	if got := (ClientLateness{Ticks: 300, PeriodMS: 5, StallMS: 500}).StallShare(); got != 0.25 {
		t.Errorf("stall share %v, want 0.25", got)
	}
	other := t.TempDir()
	if err := WriteSummary(other, map[string]any{"client": map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := ReadClientLateness(other); ok {
		t.Error("a summary without timekeeping: lateness found")
	}
}
