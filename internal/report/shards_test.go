package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/results"
)

// writeRun writes records and, when info is set, run.json into dir.
func writeRun(t *testing.T, dir string, recs []*latency.Record, info *results.RunInfo) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, r := range recs {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	if err := os.WriteFile(filepath.Join(dir, results.RequestsFile), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if info != nil {
		if err := results.WriteRunInfo(dir, *info); err != nil {
			t.Fatal(err)
		}
	}
}

// moved is r with every instant it has moved by d.
func moved(r *latency.Record, d int64) *latency.Record {
	c := *r
	c.IntendedNS += d
	c.SentNS += d
	c.WroteNS += d
	if c.FirstTokenNS != 0 {
		c.FirstTokenNS += d
	}
	if c.EndNS != 0 {
		c.EndNS += d
	}
	c.ChunkNS = append([]int64(nil), r.ChunkNS...)
	for i := range c.ChunkNS {
		c.ChunkNS[i] += d
	}
	return &c
}

// shardedRun writes one run's records as one folder ("whole") and as four
// shard folders (request k to shard k mod 4), each counting its instants
// from its own start: shard i started 7·i ms after shard 0, on the same
// host, or, on other hosts, at wall instants that its measured offset to
// the target corrects. It returns the whole folder and the shards'.
func shardedRun(t *testing.T, reqs []synthReq, hosts bool) (string, []string) {
	t.Helper()
	root := t.TempDir()
	var all []*latency.Record
	parts := make([][]*latency.Record, 4)
	for k, s := range reqs {
		r := s.record(k)
		all = append(all, r)
		i := k % 4
		// On its own host, shard i's wall clock is 20·i ms behind the
		// target's (offset +20·i ms) and it started 7·i ms after shard 0
		// in true time: its wall clock read 7·i − 20·i ms past shard 0's
		// start then. Its records count from its own start.
		parts[i] = append(parts[i], moved(r, -int64(i)*7e6))
	}
	writeRun(t, filepath.Join(root, "whole"), all, &results.RunInfo{Mode: "open", OfferedRate: 10})
	var dirs []string
	const t0 = int64(1_750_000_000_000_000_000)
	for i, recs := range parts {
		si := &results.ShardInfo{Index: i, Count: 4, Workload: "w1", StartUnixNS: t0 + int64(i)*7e6, Host: "one",
			ClockOffsetNS: 3e6 - int64(i)*100, ClockUncertaintyNS: 5e5}
		if hosts {
			si.Host = fmt.Sprint("host", i)
			si.StartUnixNS = t0 + int64(i)*7e6 - int64(i)*20e6
			si.ClockOffsetNS = int64(i) * 20e6
		}
		dir := filepath.Join(root, "shards", fmt.Sprint("shard-", i))
		writeRun(t, dir, recs, &results.RunInfo{Mode: "open", OfferedRate: 10, Shard: si, Warnings: []string{"w"}})
		dirs = append(dirs, dir)
	}
	return filepath.Join(root, "whole"), dirs
}

// TestShardsMergeToTheWholeRun: four shards merged report exactly what the
// whole run reports — the same counts, duration, rates and every
// percentile (nearest rank over the same values), including the gaps past
// the exact cap, where both read the same merged histogram — whether the
// shards share a host or their clocks are joined by measured offsets.
func TestShardsMergeToTheWholeRun(t *testing.T) {
	defer func(c int) { itlExactCap = c }(itlExactCap)
	itlExactCap = 5000 // the ITL and ICL gaps end up in histograms
	reqs := baseline(400, 10, 3)
	for _, hosts := range []bool{false, true} {
		t.Run(fmt.Sprint("hosts=", hosts), func(t *testing.T) {
			wholeDir, shardDirs := shardedRun(t, reqs, hosts)
			whole, err := Load(context.Background(), []string{wholeDir}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range [][]string{shardDirs, {filepath.Dir(shardDirs[0])}} {
				merged, err := Load(context.Background(), in, Options{})
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(whole.Summary, merged.Summary, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
					t.Errorf("summary (-whole +merged):\n%s", diff)
				}
				if diff := cmp.Diff(whole.Metrics, merged.Metrics, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
					t.Errorf("distributions (-whole +merged):\n%s", diff)
				}
				if len(merged.Sources) != 1 || !strings.HasSuffix(merged.Sources[0], "(4 shards)") {
					t.Errorf("sources %q", merged.Sources)
				}
				if merged.Figures.Timeline == nil {
					t.Error("no timeline: the shards' instants are not on one clock")
				}
				if !containsNote(merged, "4 shards of one run (workload w1) merged") {
					t.Errorf("notes %q", merged.Notes)
				}
				if len(merged.Runs) != 4 || merged.Runs[3].Shard.ShiftNS != 21e6 || merged.Runs[2].Warnings[0] != "shard 2/4: w" {
					t.Errorf("runs %+v", merged.Runs)
				}
			}
		})
	}
}

// TestShardClockJoin: hand-computed shifts. Shard 1 on another host
// started at wall 1000 ms with its clock +5 ms ± 1 ms from the target's;
// shard 0 started at wall 1010 ms, +12 ms ± 2 ms. On shard 0's clock,
// shard 1 started at 1000 + (5 − 12) = 993 ms: 17 ms before shard 0,
// which is shifted by 17 ms. Shard 2, unmeasured, is taken at its wall
// start, 1020 ms (+27 ms after shard 1).
func TestShardClockJoin(t *testing.T) {
	ins := []input{
		{file: "a/requests.jsonl", has: true, info: results.RunInfo{Shard: &results.ShardInfo{Index: 0, Count: 3, Workload: "w", Host: "h0",
			StartUnixNS: 1010e6, ClockOffsetNS: 12e6, ClockUncertaintyNS: 2e6}}},
		{file: "b/requests.jsonl", has: true, info: results.RunInfo{Shard: &results.ShardInfo{Index: 1, Count: 3, Workload: "w", Host: "h1",
			StartUnixNS: 1000e6, ClockOffsetNS: 5e6, ClockUncertaintyNS: 1e6}}},
		{file: "c/requests.jsonl", has: true, info: results.RunInfo{Shard: &results.ShardInfo{Index: 2, Count: 3, Workload: "w", Host: "h2",
			StartUnixNS: 1020e6, ClockError: "the target sends no Date header"}}},
	}
	plan, err := planShards(ins)
	if err != nil {
		t.Fatal(err)
	}
	var shifts []int64
	for _, p := range plan.parts {
		shifts = append(shifts, p.shift)
	}
	if diff := cmp.Diff([]int64{17e6, 0, 27e6}, shifts); diff != "" {
		t.Errorf("shifts (-want +got):\n%s", diff)
	}
	for _, want := range []string{"shard 1 on host h1, clock -7.000 ms ± 3.000 ms from shard 0's", "shard 2 on host h2, clock assumed to agree with shard 0's (the target sends no Date header)"} {
		if !strings.Contains(plan.note, want) {
			t.Errorf("note %q does not say %q", plan.note, want)
		}
	}
}

// TestShardsThatAreNotOneRun: each way inputs can fail to be the shards of
// one run is refused with a message that names it.
func TestShardsThatAreNotOneRun(t *testing.T) {
	recs := []*latency.Record{baseline(1, 10, 1)[0].record(0)}
	root := t.TempDir()
	shard := func(name string, i, n int, w string) string {
		dir := filepath.Join(root, name)
		var info *results.RunInfo
		if n > 0 {
			info = &results.RunInfo{Shard: &results.ShardInfo{Index: i, Count: n, Workload: w, StartUnixNS: 1}}
		}
		writeRun(t, dir, recs, info)
		return dir
	}
	a, b, c := shard("a", 0, 3, "w"), shard("b", 1, 3, "w"), shard("c", 2, 3, "w")
	for _, tt := range []struct {
		in   []string
		want string
	}{
		{[]string{a, shard("plain", 0, 0, "")}, "is not a shard"},
		{[]string{a, b, shard("four", 2, 4, "w")}, "one of 3 shards"},
		{[]string{a, b, shard("other", 2, 3, "v")}, "split different workloads"},
		{[]string{a, b, shard("again", 1, 3, "w")}, "are both shard 1/3"},
		{[]string{a, c}, "2 of 3 shards given, shard 1 missing"},
	} {
		_, err := Load(context.Background(), tt.in, Options{})
		if !errors.Is(err, ErrShards) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want ErrShards saying %q", tt.in, err, tt.want)
		}
	}
	if _, err := Load(context.Background(), []string{a, b, c}, Options{}); err != nil {
		t.Errorf("the three shards: %v", err)
	}
}

// Two different runs given together are refused, pointing to --compare;
// two runs of one setting are pooled.
func TestUnrelatedRunsRefused(t *testing.T) {
	root := t.TempDir()
	recs := []*latency.Record{{Schema: 1, ID: "a", IntendedNS: 0, SentNS: 0, FirstTokenNS: 0.5e9, EndNS: 1e9, InputTokens: 10, OutputTokens: 10}}
	open := &results.RunInfo{Target: "http://h:8000", Model: "m", Mode: "open", OfferedRate: 2}
	closed := &results.RunInfo{Target: "http://h:8000", Model: "m", Mode: "closed", Concurrency: 4}
	writeRun(t, filepath.Join(root, "a"), recs, open)
	writeRun(t, filepath.Join(root, "b"), recs, closed)
	writeRun(t, filepath.Join(root, "c"), recs, open)
	_, err := Load(context.Background(), []string{filepath.Join(root, "a"), filepath.Join(root, "b")}, Options{})
	if !errors.Is(err, ErrUnrelated) || !strings.Contains(err.Error(), "load open against closed") ||
		!strings.Contains(err.Error(), "report --compare "+filepath.Join(root, "a")+" "+filepath.Join(root, "b")) {
		t.Errorf("error %v, want ErrUnrelated naming the difference and --compare", err)
	}
	if _, err := Load(context.Background(), []string{filepath.Join(root, "a"), filepath.Join(root, "c")}, Options{}); err != nil {
		t.Errorf("two runs of one setting: %v", err)
	}
}
