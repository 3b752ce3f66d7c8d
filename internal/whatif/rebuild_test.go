package whatif

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/simulate"
)

// TestOneRun: the what-if prices one input holding one run at one load.
func TestOneRun(t *testing.T) {
	one := results.RunInfo{Target: "embedded"}
	sweep := results.RunInfo{Points: []results.SweepPoint{{}, {}}}
	for _, tc := range []struct {
		name   string
		inputs int
		runs   []results.RunInfo
		want   bool
	}{
		{"one run", 1, []results.RunInfo{one}, true},
		{"one folder without run.json", 1, nil, true},
		{"two inputs", 2, []results.RunInfo{one}, false},
		{"two runs", 1, []results.RunInfo{one, one}, false},
		{"a sweep", 1, []results.RunInfo{sweep}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := OneRun(tc.inputs, &report.Report{Runs: tc.runs}); got != tc.want {
				t.Errorf("OneRun = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestReadRecorded: whatif reads a typed run back as written; a folder of
// flags only (version 1) is not its own to read.
func TestReadRecorded(t *testing.T) {
	want := simulate.RunConfig{Options: simulate.DefaultOptions(), Given: []string{"rate"}}
	want.Options.Workload.Rate, want.Options.Replicas = 7, 3
	sim := engine.DefaultOptions()
	sim.MaxNumSeqs = 16
	want.SimEngine = &sim
	dir := t.TempDir()
	if err := results.WriteConfig(dir, results.Config{Config: map[string]string{"rate": "7"}, Run: want}); err != nil {
		t.Fatal(err)
	}
	rec, ok := ReadRecorded(dir)
	if !ok || rec.Err != nil || rec.Run == nil {
		t.Fatalf("got %+v, %v", rec, ok)
	}
	if d := cmp.Diff(want, *rec.Run); d != "" {
		t.Errorf("read back (-want +got):\n%s", d)
	}
	old := t.TempDir()
	if err := results.WriteConfig(old, results.Config{Config: map[string]string{"rate": "7"}}); err != nil {
		t.Fatal(err)
	}
	if rec, ok := ReadRecorded(old); ok {
		t.Errorf("version 1: got %+v, want none", rec)
	}
}
