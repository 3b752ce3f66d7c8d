package cli

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/simulate"
)

// TestRecordedRunVersions reads each config.json schema version: a folder
// of version 1 (flags by name, recorded by a build before the typed run)
// through the adapter, and one of version 2 (the typed run) as written for
// the same command line; both give the same typed configuration.
func TestRecordedRunVersions(t *testing.T) {
	for _, tc := range []struct {
		run   string
		check func(t *testing.T, rc simulate.RunConfig)
	}{
		{"sim", func(t *testing.T, rc simulate.RunConfig) {
			o := rc.Options
			if o.Engine.MaxNumSeqs != 32 || o.Replicas != 2 || o.Workload.Seed != 7 || o.Engine.Seed != 7 ||
				o.Workload.Rate != 5 || o.Workload.Requests != 20 || o.Workload.OutputTokens != "32" || rc.SimEngine != nil {
				t.Errorf("sim: %+v", rc)
			}
		}},
		{"bench", func(t *testing.T, rc simulate.RunConfig) {
			o := rc.Options
			if rc.SimEngine == nil || rc.SimEngine.MaxNumSeqs != 16 || !o.IgnoreEOS || o.Workload.Seed != 3 ||
				o.Workload.Rate != 20 || o.Workload.Requests != 10 || o.Workload.OutputTokens != "16" {
				t.Errorf("bench: %+v (sim engine %+v)", rc, rc.SimEngine)
			}
		}},
	} {
		t.Run(tc.run, func(t *testing.T) {
			var runs []simulate.RunConfig
			for _, v := range []string{"configv1", "configv2"} {
				rec, err := recordedRun(filepath.Join("testdata", v, tc.run))
				if err != nil || rec.Err != nil || rec.Run == nil {
					t.Fatalf("%s: %+v, %v", v, rec, err)
				}
				if !slices.Contains(rec.Run.Given, "rate") || !slices.Contains(rec.Run.Given, "requests") {
					t.Errorf("%s: given %v, want rate and requests among them", v, rec.Run.Given)
				}
				tc.check(t, *rec.Run)
				runs = append(runs, *rec.Run)
			}
			if d := cmp.Diff(runs[0], runs[1]); d != "" {
				t.Errorf("version 1 adapted and version 2 differ (-v1 +v2):\n%s", d)
			}
		})
	}
}

// TestRecordedRunNone: a folder without config.json has no run.
func TestRecordedRunNone(t *testing.T) {
	rec, err := recordedRun(t.TempDir())
	if err != nil || rec.Run != nil || rec.Err != nil {
		t.Fatalf("got %+v, %v; want none", rec, err)
	}
}
