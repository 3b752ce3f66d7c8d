package results

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/tokentrace/tokentrace/internal/latency"
)

// writeRecords writes records (and, when info is not zero, run.json) into
// a new folder.
func writeRecords(t *testing.T, info RunInfo, recs ...latency.Record) string {
	t.Helper()
	dir := t.TempDir()
	var b []byte
	for _, r := range recs {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b = append(append(b, line...), '\n')
	}
	if err := os.WriteFile(RecordsPath(dir), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if info.Mode != "" {
		if err := WriteRunInfo(dir, info); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// rec is a successful record: sent at intended (ns), first token 1 ms and
// end 5 ms later.
func rec(id string, intended int64, in, out int) latency.Record {
	return latency.Record{Schema: 2, ID: id, IntendedNS: intended, SentNS: intended, FirstTokenNS: intended + 1e6,
		EndNS: intended + 5e6, InputTokens: in, OutputTokens: out, Status: 200}
}

// ReadRun keeps every successful request with token counts, warm-up
// included, in the order sent (intended instant, then the records' seq, or
// in older records the id's sequence number), from the first intended instant; and settles what they share:
// the records' prefix_blocks, else their cached tokens, else their shared
// tokens, as whole blocks of CachedBlockTokens of one common prefix.
func TestReadRun(t *testing.T) {
	with := func(r latency.Record, f func(*latency.Record)) latency.Record { f(&r); return r }
	type got struct {
		IDs         []string
		Intended    []time.Duration
		Warm        int
		Skipped     int
		Blocks      [][]int64
		BlockTokens int
		Sharing     string
	}
	for _, c := range []struct {
		name string
		recs []latency.Record
		want got
	}{
		{"order, warm-up, failures", []latency.Record{
			rec("r-3", 2e9, 100, 10),
			with(rec("r-1", 1e9, 100, 10), func(r *latency.Record) { r.Warmup = true }),
			rec("r-10", 2e9, 100, 10), // same instant: by sequence number, 3 before 10
			with(rec("r-2", 15e8, 100, 10), func(r *latency.Record) { r.Status, r.ErrorKind = 500, "http_status" }),
			rec("r-4", 3e9, 0, 10), // no token counts
		}, got{IDs: []string{"r-1", "r-3", "r-10"}, Intended: []time.Duration{0, time.Second, time.Second}, Warm: 1, Skipped: 2,
			Blocks: [][]int64{nil, nil, nil}, Sharing: "no prompt shares"}},
		{"order by the records' seq, whatever the ids", []latency.Record{
			with(rec("b", 1e9, 100, 10), func(r *latency.Record) { r.Seq = 7 }),
			with(rec("a-9", 1e9, 100, 10), func(r *latency.Record) { r.Seq = 12 }),
			with(rec("c", 1e9, 100, 10), func(r *latency.Record) { r.Seq = 3 }),
		}, got{IDs: []string{"c", "b", "a-9"}, Intended: []time.Duration{0, 0, 0},
			Blocks: [][]int64{nil, nil, nil}, Sharing: "no prompt shares"}},
		{"prefix blocks", []latency.Record{
			with(rec("m-1", 0, 1536, 4), func(r *latency.Record) { r.PrefixBlocks, r.PrefixBlockTokens = []int64{1, 2, 9}, 512 }),
			with(rec("m-2", 1e6, 1536, 4), func(r *latency.Record) {
				r.PrefixBlocks, r.PrefixBlockTokens, r.CachedTokens = []int64{1, 2, 10}, 512, 1024
			}),
			with(rec("m-3", 2e6, 64, 4), func(r *latency.Record) { r.PrefixBlocks, r.PrefixBlockTokens = []int64{5}, 64 }), // another size
		}, got{IDs: []string{"m-1", "m-2", "m-3"}, Intended: []time.Duration{0, time.Millisecond, 2 * time.Millisecond},
			Blocks: [][]int64{{1, 2, 9}, {1, 2, 10}, nil}, BlockTokens: 512, Sharing: "of 512 tokens as the records name them (prefix_blocks); 1 records of another block size"}},
		{"cached tokens", []latency.Record{
			rec("c-1", 0, 100, 4),
			with(rec("c-2", 1e6, 100, 4), func(r *latency.Record) { r.CachedTokens, r.SharedPrefixTokens = 47, 90 }), // 2 whole blocks of 16
			with(rec("c-3", 2e6, 30, 4), func(r *latency.Record) { r.CachedTokens = 64 }),                            // capped at the input: 1 block
		}, got{IDs: []string{"c-1", "c-2", "c-3"}, Intended: []time.Duration{0, time.Millisecond, 2 * time.Millisecond},
			Blocks: [][]int64{{}, {1, 2}, {1}}, BlockTokens: CachedBlockTokens, Sharing: "prefix-cache hits (cached_tokens)"}},
		{"shared tokens", []latency.Record{
			with(rec("s-1", 0, 100, 4), func(r *latency.Record) { r.SharedPrefixTokens = 33 }),
			with(rec("s-2", 1e6, 100, 4), func(r *latency.Record) { r.SharedPrefixTokens = 48 }),
		}, got{IDs: []string{"s-1", "s-2"}, Intended: []time.Duration{0, time.Millisecond},
			Blocks: [][]int64{{1, 2}, {1, 2, 3}}, BlockTokens: CachedBlockTokens, Sharing: "shared prefixes (shared_prefix_tokens"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			run, err := ReadRun(writeRecords(t, RunInfo{}, c.recs...))
			if err != nil {
				t.Fatal(err)
			}
			g := got{Warm: run.Warm(), Skipped: run.Skipped, BlockTokens: run.BlockTokens, Sharing: c.want.Sharing}
			for _, s := range run.Requests {
				g.IDs, g.Intended, g.Blocks = append(g.IDs, s.ID), append(g.Intended, s.Intended), append(g.Blocks, s.Blocks)
				if len(s.Blocks) > 0 && s.BlockTokens != run.BlockTokens {
					t.Errorf("%s: blocks of %d tokens, the run's are %d", s.ID, s.BlockTokens, run.BlockTokens)
				}
			}
			if !strings.Contains(run.Sharing, c.want.Sharing) {
				t.Errorf("sharing %q, want it to say %q", run.Sharing, c.want.Sharing)
			}
			if diff := cmp.Diff(c.want, g); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// In a closed loop, the k-th request sent after the workers' first ones
// follows the k-th answer to end, and its Turnaround is the time between
// the two; a worker's first request, an open loop and a closed loop with
// no request beyond its workers' first ones have none. Hand-computed: 2
// workers; sends at 0, 2, 6, 10 and 11.5 ms, each answer ending 5 ms after
// its send (rec): at 5, 7, 11, 15 and 16.5 ms; the third request follows
// the first end by 1 ms, the fourth the second by 3 ms, the fifth the
// third by 0.5 ms.
func TestReadRunClosedLoopTurnaround(t *testing.T) {
	recs := []latency.Record{rec("t-1", 0, 10, 4), rec("t-2", 2e6, 10, 4), rec("t-4", 10e6, 10, 4), rec("t-3", 6e6, 10, 4), rec("t-5", 115e5, 10, 4)}
	ms := func(f float64) time.Duration { return time.Duration(f * 1e6) }
	for _, c := range []struct {
		name string
		info RunInfo
		want []time.Duration
	}{
		{"closed loop of 2", RunInfo{Mode: "closed", Concurrency: 2}, []time.Duration{0, 0, ms(1), ms(3), ms(0.5)}},
		{"open loop", RunInfo{Mode: "open", OfferedRate: 5}, []time.Duration{0, 0, 0, 0, 0}},
		{"closed loop of 5", RunInfo{Mode: "closed", Concurrency: 5}, []time.Duration{0, 0, 0, 0, 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			run, err := ReadRun(writeRecords(t, c.info, recs...))
			if err != nil {
				t.Fatal(err)
			}
			var got []time.Duration
			for _, s := range run.Requests {
				got = append(got, s.Turnaround)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("turnarounds (-want +got):\n%s", diff)
			}
		})
	}
}

// ReadObserved is ReadRun's measured requests: the warm-up left out, at
// least MinObserved of them, each with its instants.
func TestReadObservedIsReadRunsMeasuredRequests(t *testing.T) {
	var recs []latency.Record
	for i := range 10 {
		r := rec("r-"+string(rune('a'+i)), int64(i)*1e8, 100, 10)
		r.Warmup = i < 2
		recs = append(recs, r)
	}
	w, err := ReadObserved(writeRecords(t, RunInfo{}, recs...))
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Requests) != 8 || w.Skipped != 2 || w.Requests[0].ID != "r-c" || w.Requests[0].Arrival != 0 || w.Requests[7].Arrival != 700*time.Millisecond {
		t.Errorf("%d requests (first %s at %v, last at %v), %d skipped; want 8 from r-c at 0 to 700ms, 2 skipped",
			len(w.Requests), w.Requests[0].ID, w.Requests[0].Arrival, w.Requests[len(w.Requests)-1].Arrival, w.Skipped)
	}
	if _, err := ReadObserved(writeRecords(t, RunInfo{}, recs[3:]...)); !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "at least 8") {
		t.Errorf("7 measured requests: %v, want ErrBadInput asking for 8", err)
	}
	untimed := recs[5]
	untimed.FirstTokenNS = 0
	if _, err := ReadObserved(writeRecords(t, RunInfo{}, append(recs[:5:5], untimed)...)); !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "no first-token") {
		t.Errorf("an untimed record: %v, want ErrBadInput naming what it lacks", err)
	}
}
