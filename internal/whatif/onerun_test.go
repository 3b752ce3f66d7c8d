package whatif

import (
	"testing"

	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/results"
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
