package results

import (
	"bufio"
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
