package bench

import (
	"bytes"
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/stats"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// agentRun runs agent sessions against the embedded engine and the tool
// endpoint tools (nil: the built-in simulator); mods change the run's
// configuration.
func agentRun(t *testing.T, url string, o workload.Options, tools *ToolTarget, concurrency, requests int, mods ...func(*Config)) (*Result, []latency.Record) {
	t.Helper()
	src, _, err := o.Build(true, func(string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "run")
	cfg := Config{
		Target: Target{BaseURL: url, Endpoint: EndpointChat, Stream: true, IgnoreEOS: true,
			ContinuousUsage: true, Timeout: time.Minute},
		Workload: src,
		Load:     workload.Load{Concurrency: concurrency, Requests: requests, Seed: 1},
		Tools:    tools,
		OutDir:   dir, Command: []string{"tokentrace", "bench", "(test)"}, SkipCalibration: true,
	}
	for _, m := range mods {
		m(&cfg)
	}
	var out bytes.Buffer
	res, err := Run(context.Background(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	return res, readRecords(t, filepath.Join(dir, results.RequestsFile))
}

// expectedSaving is what parallel tool calls save on a session by the
// tool latencies its plan drew: Σ over its steps of (sum − max).
func expectedSaving(t *testing.T, o workload.Options, session int64) time.Duration {
	t.Helper()
	src, _, err := o.Build(true, func(string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	s := src.Session(session).(workload.ToolSession)
	var saving time.Duration
	for {
		r, ok := s.Next(8)
		if !ok {
			return saving
		}
		var sum, longest time.Duration
		for _, c := range r.Tools {
			sum += c.Latency
			longest = max(longest, c.Latency)
		}
		saving += sum - longest
		s.ToolResults(make([]string, len(r.Tools)))
	}
}

// sessionTotals gives each complete session's span, from its first
// request's intended send to its last tool call's end, and the part of it
// its requests' own E2E took (the model's time, queue included).
func sessionTotals(recs []latency.Record) map[int64]sessionTime {
	steps := map[int64][]latency.Record{}
	for _, r := range recs {
		steps[r.Session] = append(steps[r.Session], r)
	}
	out := map[int64]sessionTime{}
	for id, rs := range steps {
		if len(rs) != rs[0].Steps {
			continue
		}
		first, end := rs[0].IntendedNS, int64(0)
		var model time.Duration
		ok := true
		for _, r := range rs {
			e2e, got := r.E2E()
			first, end, ok = min(first, r.IntendedNS), max(end, r.ToolsEnd()), ok && r.OK() && got
			model += e2e
		}
		if ok {
			out[id] = sessionTime{total: time.Duration(end - first), model: model}
		}
	}
	return out
}

// sessionTime is one session's span and its requests' share of it.
type sessionTime struct{ total, model time.Duration }

// Parallel tool calls cut each session's latency by what the tool
// latencies say: Σ over steps of (sum − max), within 10 %. The sequential
// run's report simulates the same saving from its spans, and the records
// carry every call with its start and end.
func TestAgentParallelToolCallsSaveTheExpectedTime(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine")
	}
	srv := startSim(t, nil)
	// Few sessions at a time with short answers: the model's time is
	// small and nearly the same in both runs, whatever the tools do to
	// how many steps reach it at once.
	const workers, steps = 2, 3
	o := workload.DefaultOptions()
	o.InputTokens, o.OutputTokens, o.Seed = "32", "2", 11
	o.AgentSteps, o.AgentTools, o.ToolLatency, o.ToolResultTokens = steps, 3, "uniform:150ms-350ms", "40"
	// Twice the requests the first sessions need: a worker whose session
	// ended early starts another, and the first ones still end.
	requests := 4 * workers * steps
	o.ToolMode = "sequential"
	seq, seqRecs := agentRun(t, srv.URL(), o, &ToolTarget{Timeout: 10 * time.Second}, workers, requests)
	o.ToolMode = "parallel"
	par, parRecs := agentRun(t, srv.URL(), o, &ToolTarget{Timeout: 10 * time.Second}, workers, requests)
	for name, recs := range map[string][]latency.Record{"sequential": seqRecs, "parallel": parRecs} {
		for _, r := range recs {
			wantTools := 3
			if r.Turn == steps {
				wantTools = 0
			}
			if !r.OK() || r.Steps != steps || len(r.Tools) != wantTools || r.ToolsParallel != (name == "parallel" && wantTools > 0) {
				t.Fatalf("%s: record %+v", name, r)
			}
			for i, s := range r.Tools {
				if s.StartNS < r.EndNS || s.EndNS <= s.StartNS || s.ResultTokens != 40 {
					t.Fatalf("%s: tool span %d %+v of a step ending at %d", name, i, s, r.EndNS)
				}
			}
		}
	}
	st, pt := sessionTotals(seqRecs), sessionTotals(parRecs)
	// The saving is measured outside the model: each session's span less
	// its requests' E2E, in the sequential run against the parallel one. A
	// busy machine that slows the model in one run and not the other (the
	// runs follow each other) moves the spans, not what the tools took.
	var rel []float64         // per session: (saved − expected) / expected
	var wants []time.Duration // the sequential run's sessions' expected savings
	for id, d := range st {
		e := expectedSaving(t, o, id)
		if e < 200*time.Millisecond {
			t.Fatalf("session %d's plan saves only %v: not a test", id, e)
		}
		wants = append(wants, e)
		if p, ok := pt[id]; ok {
			saved := (d.total - d.model) - (p.total - p.model)
			rel = append(rel, float64(saved-e)/float64(e))
			t.Logf("session %d: parallel tool calls saved %v outside the model (%v of the whole span), expected %v",
				id, saved, d.total-p.total, e)
		}
	}
	if len(rel) < 3 {
		t.Fatalf("only %d sessions complete in both runs", len(rel))
	}
	// The median session: a timer that a busy machine fires late
	// lengthens one session, not the verdict.
	slices.Sort(rel)
	if m := stats.Percentile(rel, 50); math.Abs(m) > 0.1 {
		t.Errorf("parallel tool calls saved the median session %+.1f %% of the expected saving (±10 %%)", 100*m)
	}
	ss, ps := seq.Report.Sessions, par.Report.Sessions
	for i := range ss.Components {
		t.Logf("%s: sequential %.1f ms, parallel %.1f ms", ss.Components[i].Name, ss.Components[i].Mean, ps.Components[i].Mean)
	}
	if ss == nil || ps == nil || ss.Sessions != len(st) || ps.Sessions != len(pt) {
		t.Fatalf("sessions: sequential %+v, parallel %+v", ss, ps)
	}
	// The sequential run's own report simulates the saving from its spans.
	slices.Sort(wants)
	sim, simWant := time.Duration(ss.ParallelTools.Saving.P50*1e6), stats.Percentile(wants, 50)
	if ss.ParallelTools.Basis != "simulated" || math.Abs(float64(sim-simWant)) > 0.1*float64(simWant) {
		t.Errorf("the sequential run simulates a median saving of %v (%s), expected %v", sim, ss.ParallelTools.Basis, simWant)
	}
	if ps.ParallelTools.Basis != "none" {
		t.Errorf("a parallel run has nothing to save: %+v", ps.ParallelTools)
	}
	var sum float64
	for _, c := range ss.Components {
		sum += c.Mean
	}
	if math.Abs(sum-ss.Latency.Mean) > 1e-6*ss.Latency.Mean {
		t.Errorf("the parts' means sum to %.6f ms, the sessions' mean is %.6f ms", sum, ss.Latency.Mean)
	}
}

// A tool endpoint that fails or hangs fails the step with the call's
// error kind, within the tool timeout; the record names the step, and the
// session goes no further.
func TestAgentToolFailureFailsTheStep(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded engine")
	}
	srv := startSim(t, nil)
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer hanging.Close()
	defer close(release)
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"error":{"message":"tool crashed","type":"server_error"}}`))
	}))
	defer failing.Close()
	o := workload.DefaultOptions()
	o.InputTokens, o.OutputTokens = "32", "4"
	o.AgentSteps, o.AgentTools = 3, 2
	for _, tc := range []struct {
		name, url string
		kind      latency.ErrorKind
		msg       string
	}{
		{"hangs", hanging.URL, latency.FailToolTimeout, "step 1: tool call 0 (tool1): no answer within 300ms"},
		{"fails", failing.URL, latency.FailTool, "step 1: tool call 0 (tool1): status 500: tool crashed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, recs := agentRun(t, srv.URL(), o, &ToolTarget{URL: tc.url, Timeout: 300 * time.Millisecond}, 2, 4)
			if len(recs) != 4 {
				t.Fatalf("%d records, want the first step of 4 sessions: %+v", len(recs), recs)
			}
			for _, r := range recs {
				if r.ErrorKind != tc.kind || !strings.Contains(r.Error, tc.msg) || r.Turn != 1 || len(r.Tools) != 2 {
					t.Fatalf("record: kind %q error %q turn %d tools %+v", r.ErrorKind, r.Error, r.Turn, r.Tools)
				}
				if d := r.Tools[0].EndNS - r.Tools[0].StartNS; tc.kind == latency.FailToolTimeout && d > int64(5*time.Second) {
					t.Errorf("the hanging call took %v: the timeout did not bound it", time.Duration(d))
				}
			}
			s := res.Report.Sessions
			if s == nil || s.Failed != 4 || s.Sessions != 0 || len(s.Failures) != 4 || s.Failures[0].Step != 1 || s.Failures[0].ErrorKind != tc.kind {
				t.Fatalf("sessions %+v", s)
			}
			if res.Report.Summary.Errors[string(tc.kind)] != 4 {
				t.Errorf("errors by kind %v", res.Report.Summary.Errors)
			}
		})
	}
}
