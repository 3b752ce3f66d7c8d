package report

import (
	"context"
	"github.com/tokentrace/tokentrace/internal/results"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A run cut short is said: no run.json beside the records, fewer records
// than run.json planned, an interrupted run, and last requests that ended
// far beyond the others. Lines that are not records are counted apart
// from the requests, failed or not.
func TestCutShortRunsAreFlagged(t *testing.T) {
	load := func(dir string) *Report {
		t.Helper()
		rep, err := Load(context.Background(), []string{dir}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	// No run.json, two unreadable lines (one malformed, one cut).
	dir := t.TempDir()
	path := writeRecords(t, dir, baseline(20, 10, 1), "not a record\n"+`{"v":2,"id":"cut","sent_ns":`)
	rep := load(dir)
	if s := rep.Summary; s.Requests != 20 || s.Failed != 0 || s.Unreadable != 2 {
		t.Errorf("summary %+v: want 20 requests, none failed, 2 unreadable lines", s)
	}
	if !containsNote(rep, "no run.json beside it: the run may have been cut short") {
		t.Errorf("notes %q", rep.Notes)
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil || !strings.Contains(text.String(), "unreadable lines 2 (not records") {
		t.Errorf("text does not count the unreadable lines apart (%v):\n%s", err, text.String())
	}
	// run.json planned 50; 20 arrived.
	if err := results.WriteRunInfo(dir, results.RunInfo{Planned: 50}); err != nil {
		t.Fatal(err)
	}
	if rep = load(dir); !containsNote(rep, "20 measured records of the 50 planned: the run was cut short") ||
		containsNote(rep, "no run.json") {
		t.Errorf("notes %q", rep.Notes)
	}
	_ = os.Remove(filepath.Join(dir, results.RunInfoFile)) // results files are created, never overwritten
	if err := results.WriteRunInfo(dir, results.RunInfo{Planned: 20, Interrupted: true}); err != nil {
		t.Fatal(err)
	}
	if rep = load(dir); !containsNote(rep, "the run was interrupted: 20 measured records of 20 planned") {
		t.Errorf("notes %q", rep.Notes)
	}
	// A whole run says none of it.
	_ = os.Remove(filepath.Join(dir, results.RunInfoFile)) // results files are created, never overwritten
	if err := results.WriteRunInfo(dir, results.RunInfo{Planned: 20}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	writeRecords(t, dir, baseline(20, 10, 1), "")
	if rep = load(dir); containsNote(rep, "cut short") || containsNote(rep, "stopped or stalled") || rep.Summary.Unreadable != 0 {
		t.Errorf("a whole run: notes %q, unreadable %d", rep.Notes, rep.Summary.Unreadable)
	}
	// The last request ends 60 s after the others (E2E about 1 s each).
	reqs := baseline(200, 10, 1)
	reqs[len(reqs)-1].tail = 60_000
	dir2 := filepath.Join(t.TempDir(), "straggler")
	writeRecords(t, dir2, reqs, "")
	if err := results.WriteRunInfo(dir2, results.RunInfo{Planned: 200}); err != nil {
		t.Fatal(err)
	}
	if rep = load(dir2); !containsNote(rep, "the last 1 requests ended") || !containsNote(rep, "stopped or stalled") {
		t.Errorf("notes %q", rep.Notes)
	}
}
