package cli

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/simulate"
	"github.com/tokentrace/tokentrace/internal/whatif"
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

// TestWrittenRunIsTheFlagsRun: the typed run bench and simulate write
// from their options is the one the version-1 adapter reads from the same
// run's flags, so a run's twin does not depend on the version of its
// folder; its given settings are those the command line names. The
// settings the adapter binds no flag for (simulate's slo, output_dir,
// like, steps, force and answer settings) are the run's own; a bench
// run's own engine and scrape interval are simulate's defaults, where the
// adapter reads bench's --model and --scrape-interval into them by name
// (the twin of a bench run takes its engine from sim_engine).
func TestWrittenRunIsTheFlagsRun(t *testing.T) {
	for _, tc := range []struct {
		sim  bool
		args []string
	}{
		{true, []string{"simulate", "--rate", "5", "--requests", "20", "--max-num-seqs", "32", "--seed", "7", "--output-tokens", "32",
			"--replicas", "2", "--balancer", "least_outstanding", "--queue-concurrency", "8", "--slo", "ttft:p99<=1s"}},
		{true, []string{"simulate", "--engine", "trtllm", "--concurrency", "4", "--requests", "8", "--input-tokens", "uniform:100-200",
			"--output-tokens", "8", "--ignore-eos", "--endpoint", "completions"}},
		{false, []string{"bench", "--rate", "20", "--requests", "6", "--sim-max-num-seqs", "16", "--output-tokens", "4",
			"--input-tokens", "64", "--seed", "3"}},
		{false, []string{"bench", "--sim-engine", "sglang", "--concurrency", "2", "--requests", "4", "--output-tokens", "4",
			"--input-tokens", "64", "--ignore-eos", "--prefix-tokens", "32", "--prefix-groups", "2"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			if out, err := run(t, append(tc.args, "--output-dir", dir)...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			rec, ok := whatif.ReadRecorded(dir)
			if !ok || rec.Err != nil || rec.Run == nil {
				t.Fatalf("no typed run written: %+v", rec)
			}
			flags, err := results.ReadConfig(dir)
			if err != nil {
				t.Fatal(err)
			}
			command, _ := results.ReadCommand(dir)
			want, err := runConfigOfFlags(flags, tc.sim, command)
			if err != nil {
				t.Fatal(err)
			}
			got := *rec.Run
			for _, a := range tc.args[1:] {
				name, ok := strings.CutPrefix(a, "--")
				if f := strings.ReplaceAll(name, "-", "_"); ok && !strings.HasPrefix(name, "sim-") && !(tc.sim && f == "seed") && !slices.Contains(got.Given, f) { // simulate's seed is the whole run's, no group's
					t.Errorf("given %v lacks %q", got.Given, f)
				}
			}
			o, w := &got.Options, &want.Options
			w.Like, w.SLO, w.OutputDir, w.Steps, w.Force = o.Like, o.SLO, o.OutputDir, o.Steps, o.Force
			w.ServedModelName, w.QueueFullStatus = o.ServedModelName, o.QueueFullStatus
			want.Stream = got.Stream // bench's, which version 1 does not adapt
			if !tc.sim {
				w.Engine, w.ScrapeInterval = o.Engine, o.ScrapeInterval
			}
			got.Given, want.Given = nil, nil
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("the written run differs from the flags' (-flags +written):\n%s", d)
			}
		})
	}
}
