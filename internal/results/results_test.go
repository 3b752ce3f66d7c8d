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
