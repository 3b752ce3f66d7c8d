package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// A sweep against serve with prefix caching and one shared prefix: with
// --between-cells reset each cell's first request finds the cache empty
// (0 cached tokens) and run.json says what was reset; with none, the
// second cell's first request hits the first cell's prefix.
func TestSweepResetsPrefixCacheBetweenCells(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine")
	}
	for _, tc := range []struct {
		mode       string
		wantCached bool // the second cell's first request hits the cache
	}{{BetweenCellsReset, false}, {BetweenCellsNone, true}} {
		t.Run(tc.mode, func(t *testing.T) {
			srv := startSim(t, nil)
			dir := filepath.Join(t.TempDir(), "run")
			sw, err := ParseSweep("1,1", "concurrency")
			if err != nil {
				t.Fatal(err)
			}
			cfg := Config{
				Target: Target{BaseURL: srv.URL(), Endpoint: EndpointChat, Stream: true, IgnoreEOS: true,
					ContinuousUsage: true, Timeout: time.Minute},
				Workload: &workload.Synthetic{Chat: true, Input: workload.Fixed(160), Output: workload.Fixed(2),
					PrefixTokens: 128, PrefixGroups: 1, Turns: 1, Seed: 3},
				Load:         workload.Load{Concurrency: 1, Requests: 4, Seed: 1},
				Sweep:        sw,
				BetweenCells: tc.mode,
				OutDir:       dir, Command: []string{"tokentrace", "bench", "(test)"}, SkipCalibration: true,
			}
			var out bytes.Buffer
			if _, err := Run(context.Background(), cfg, &out); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(out.String(), "between   prefix cache reset (POST /reset_prefix_cache) before 2 of 2 cells"); got != (tc.mode == BetweenCellsReset) {
				t.Errorf("summary's between line: %t, want %t:\n%s", got, tc.mode == BetweenCellsReset, out.String())
			}
			if got := strings.Contains(out.String(), "before concurrency=1#2: prefix cache reset"); got != (tc.mode == BetweenCellsReset) {
				t.Errorf("report's sweep table note: %t, want %t", got, tc.mode == BetweenCellsReset)
			}
			first := map[string]int{} // phase → index of its earliest send
			recs := readRecords(t, filepath.Join(dir, results.RequestsFile))
			for i, r := range recs {
				if !r.OK() {
					t.Fatalf("%s failed: %s", r.ID, r.Error)
				}
				if j, ok := first[r.Phase]; !ok || r.SentNS < recs[j].SentNS {
					first[r.Phase] = i
				}
			}
			if len(first) != 2 {
				t.Fatalf("phases %v, want 2", first)
			}
			for phase, i := range first {
				got := recs[i].CachedTokens
				want0 := phase == "concurrency=1" || !tc.wantCached // the second is "concurrency=1#2"
				if want0 && got != 0 {
					t.Errorf("%s: first request had %d cached tokens, want 0 (an empty cache)", phase, got)
				}
				if !want0 && got == 0 {
					t.Errorf("%s: first request had no cached tokens; without a reset the prefix should hit", phase)
				}
			}
			raw, err := os.ReadFile(filepath.Join(dir, "run.json"))
			if err != nil {
				t.Fatal(err)
			}
			var info results.RunInfo
			if err := json.Unmarshal(raw, &info); err != nil {
				t.Fatal(err)
			}
			for _, p := range info.Points {
				reset := strings.Contains(p.BeforeCell, "POST /reset_prefix_cache")
				if reset != (tc.mode == BetweenCellsReset) || p.BeforeCellWarning != "" {
					t.Errorf("%s: before_cell %q warning %q", p.Phase, p.BeforeCell, p.BeforeCellWarning)
				}
			}
		})
	}
}

// TestBetweenCellsHookEnv: --between-cells-cmd sees the next cell, its
// index and the cell just ended in its environment.
func TestBetweenCellsHookEnv(t *testing.T) {
	log := filepath.Join(t.TempDir(), "cells.log")
	c := &cellPrep{mode: BetweenCellsNone, cmd: `echo "$TOKENTRACE_CELL_INDEX [$TOKENTRACE_PREV_CELL] $TOKENTRACE_CELL" >> ` + log}
	for _, phase := range []string{"rate=1", "rate=2"} {
		did, warn := c.before(context.Background(), phase)
		if did != "ran --between-cells-cmd" || warn != "" {
			t.Fatalf("before %s: %q, %q", phase, did, warn)
		}
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "1 [] rate=1\n2 [rate=1] rate=2\n"; got != want {
		t.Errorf("the hook saw %q, want %q", got, want)
	}
}
