package simulate

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/field"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/workload"
	"github.com/tokentrace/tokentrace/internal/workload/workloadtest"
)

// A run replayed with --like is the run: a closed loop of 8 workers with
// spread lengths, written to a folder, then simulated again from that
// folder alone (its concurrency from run.json, its served lengths and
// produced outputs from the records) gives the same TTFT, TPOT and E2E
// percentiles; an open loop replays its arrivals, and a ramped closed loop
// its ramp-up (run.json's ramp_up).
func TestLikeReplaysTheRun(t *testing.T) {
	for _, mode := range []string{"closed", "closed-ramp", "open"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			o := DefaultOptions()
			o.Workload.InputTokens, o.Workload.OutputTokens, o.Workload.Requests = "uniform:200-2000", "uniform:16-96", 120
			given := []string{"input_tokens", "output_tokens", "requests"}
			if mode != "open" {
				o.Workload.Concurrency, o.Workload.Warmup = 8, "8"
				given = append(given, "concurrency", "warmup")
			}
			if mode == "closed-ramp" {
				o.Workload.RampUp = workload.RampFirstToken
				given = append(given, "ramp_up")
			}
			if mode == "open" {
				o.Workload.Rate = 15
				given = append(given, "rate")
			}
			o.OutputDir = filepath.Join(dir, "run")
			run := writeRun(t, o, func(f string) bool { return slices.Contains(given, f) })
			lk, err := LikeRun(o.OutputDir, true, 1)
			if err != nil || lk.Load.RampName() != o.Workload.RampUp {
				t.Fatalf("replayed ramp-up %q (%v), want %q", lk.Load.RampName(), err, o.Workload.RampUp)
			}
			// An open loop's requests draw their network from the run's
			// transports (one per request); a closed loop's take the median.
			if want := map[bool]int{true: 120, false: 0}[mode == "open"]; len(lk.NetworkSample) != want {
				t.Errorf("%d network latencies to draw from, want %d", len(lk.NetworkSample), want)
			}

			l := DefaultOptions()
			l.Like, l.OutputDir = o.OutputDir, filepath.Join(dir, "like")
			said := strings.Contains(strings.Join(l.BenchDifferences(func(string) bool { return false }), "\n"), "draws each request's network")
			if said != (mode == "open") {
				t.Errorf("simulate says it draws each request's network: %t, want %t", said, mode == "open")
			}
			like := writeRun(t, l, func(string) bool { return false })
			for _, m := range []string{"ttft", "tpot", "e2e"} {
				a, b := dist(t, run, m), dist(t, like, m)
				for _, p := range [][2]float64{{a[0], b[0]}, {a[1], b[1]}, {a[2], b[2]}} {
					if math.Abs(p[0]-p[1]) > 0.02*p[0] {
						t.Errorf("%s P50/P90/P99: run %v, replayed %v", m, a, b)
						break
					}
				}
			}
		})
	}
}

func writeRun(t *testing.T, o Options, given func(string) bool) *Summary {
	t.Helper()
	cfg, out, err := o.Config(given, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sum, err := WriteRun(cfg, out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

func dist(t *testing.T, s *Summary, metric string) [3]float64 {
	t.Helper()
	for _, d := range s.Report.Metrics {
		if d.Metric == metric {
			return [3]float64{d.P50, d.P90, d.P99}
		}
	}
	t.Fatalf("no %s", metric)
	return [3]float64{}
}

// --like takes the run's workload: a workload flag beside it is refused,
// naming both.
func TestLikeRefusesWorkloadFlags(t *testing.T) {
	o := DefaultOptions()
	o.Like = t.TempDir()
	_, _, err := o.Config(func(f string) bool { return f == "rate" }, time.Now())
	var fe *field.Error
	if !errors.As(err, &fe) || fe.Field != "like" {
		t.Fatalf("error %v, want one about like", err)
	}
}

// cachedShare is Σ cached_tokens ÷ Σ input_tokens over a folder's
// successful records, how many of them name their prefix blocks, and how
// many blocks they name in all.
func cachedShare(t *testing.T, dir string) (share float64, withBlocks, blocks int) {
	t.Helper()
	var in, cached int
	err := results.EachRecord(results.RecordsPath(dir), func(_ int, r *latency.Record, err error) error {
		if err != nil {
			return err
		}
		if r.OK() {
			in, cached, blocks = in+r.InputTokens, cached+r.CachedTokens, blocks+len(r.PrefixBlocks)
			withBlocks += min(len(r.PrefixBlocks), 1)
		}
		return nil
	})
	if err != nil || in == 0 {
		t.Fatalf("%s: %d input tokens, %v", dir, in, err)
	}
	return float64(cached) / float64(in), withBlocks, blocks
}

// A run's prefix sharing is replayed: a Mooncake trace whose even rows
// share 80 % of their blocks, simulated with prefix caching, records its
// rows' blocks; --like of that folder hits the cache for the same share of
// its input tokens (within 5 %), and so does --like of a folder whose
// records keep only their cached_tokens (the server's hits).
func TestLikeReplaysPrefixSharing(t *testing.T) {
	dir := t.TempDir()
	m := workloadtest.Mooncake{Requests: 120, Blocks: 10, Shared: 8, BlockSize: 64, Output: 4, GapMS: 50}
	o := DefaultOptions()
	o.Workload.Trace, o.Workload.TraceBlockSize = m.Write(t, dir), m.BlockSize
	o.Engine.EnablePrefixCaching = true
	o.OutputDir = filepath.Join(dir, "run")
	writeRun(t, o, func(f string) bool { return f == "trace" || f == "trace_block_size" })
	want, _, blocks := cachedShare(t, o.OutputDir)
	if implied := m.ImpliedShare(true); math.Abs(want-implied) > 0.05*implied || blocks != m.Requests*m.Blocks {
		t.Fatalf("the run: cached share %.4f (the hash_ids imply %.4f), %d blocks recorded (want %d)", want, implied, blocks, m.Requests*m.Blocks)
	}

	countsOnly := filepath.Join(dir, "counts")
	stripBlocks(t, o.OutputDir, countsOnly)
	for _, from := range []string{o.OutputDir, countsOnly} {
		l := DefaultOptions()
		l.Engine.EnablePrefixCaching = true
		l.Like, l.OutputDir = from, from+"-like"
		writeRun(t, l, func(string) bool { return false })
		got, _, _ := cachedShare(t, l.OutputDir)
		t.Logf("%s: cached share %.4f, the run's %.4f", filepath.Base(from), got, want)
		if math.Abs(got-want) > 0.05*want {
			t.Errorf("--like %s: cached share %.4f, the run's %.4f (want within 5 %%)", filepath.Base(from), got, want)
		}
	}
}

// stripBlocks copies a results folder's records and run.json into to,
// the records without their prefix_blocks.
func stripBlocks(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := results.CreateRecords(to)
	if err != nil {
		t.Fatal(err)
	}
	err = results.EachRecord(results.RecordsPath(from), func(_ int, r *latency.Record, err error) error {
		if err != nil {
			return err
		}
		c := *r
		c.PrefixBlocks, c.PrefixBlockTokens = nil, 0
		w.Write(&c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	info, _, err := results.ReadRunInfo(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := results.WriteRunInfo(to, info); err != nil {
		t.Fatal(err)
	}
}

// writeLlamaCppLoop writes a closed loop of one worker against a server
// that reports no queue wait (llama.cpp's timings): three requests of 64
// prompt and 8 answer tokens, prefill 4 ms each, the client's transport
// (TTFT less prefill) 6, 4 and 10 ms, each answer 10 ms after its first
// token, and the worker's turnarounds 5 and 7 ms.
func writeLlamaCppLoop(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := results.WriteRunInfo(dir, results.RunInfo{Mode: "closed", Concurrency: 1}); err != nil {
		t.Fatal(err)
	}
	var b []byte
	at := int64(0)
	for i, transport := range []int64{6e6, 4e6, 10e6} {
		first := at + transport + 4e6
		r := latency.Record{Schema: 2, ID: fmt.Sprintf("b-%d", i+1), Stream: true, IntendedNS: at, SentNS: at,
			FirstTokenNS: first, EndNS: first + 10e6, InputTokens: 64, OutputTokens: 8, Status: 200,
			Server: &latency.ServerSplit{PrefillNS: 4e6, DecodeNS: 10e6, Source: latency.SourceLlamaCppTimings,
				Engine: latency.EngineLlamaCpp, Unreported: []string{latency.SplitQueue}}}
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b = append(append(b, line...), '\n')
		at = r.EndNS + []int64{5e6, 7e6, 0}[i]
	}
	if err := os.WriteFile(results.RecordsPath(dir), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A replayed closed loop keeps the client's measured turnaround: each
// request is sent that long after its worker's previous answer ended (5
// and 7 ms here), whatever the engine's speed. Where the server reports
// no queue wait, the client's transport holds the waits the replay
// simulates, so the network is half the least transport (4 ms → 2 ms each
// way), not half the median (6 ms).
func TestLikeReplaysTurnaroundAndLeastTransport(t *testing.T) {
	run := writeLlamaCppLoop(t)
	lk, err := LikeRun(run, true, 1)
	if err != nil {
		t.Fatal(err)
	}
	if lk.Network != 2*time.Millisecond {
		t.Errorf("network %v, want 2ms (half the least transport)", lk.Network)
	}
	o := DefaultOptions()
	o.Like, o.OutputDir = run, filepath.Join(t.TempDir(), "like")
	writeRun(t, o, func(string) bool { return false })
	var recs []latency.Record
	if err := results.EachRecord(results.RecordsPath(o.OutputDir), func(_ int, r *latency.Record, err error) error {
		if err == nil {
			recs = append(recs, *r)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(recs, func(a, b latency.Record) int { return cmp.Compare(a.IntendedNS, b.IntendedNS) })
	var got []time.Duration
	for i := 1; i < len(recs); i++ {
		got = append(got, time.Duration(recs[i].IntendedNS-recs[i-1].EndNS))
	}
	if want := []time.Duration{5 * time.Millisecond, 7 * time.Millisecond}; !slices.Equal(got, want) {
		t.Errorf("turnarounds replayed %v, want %v", got, want)
	}
}
