package report

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// step is one agent step's record, instants in milliseconds.
func step(session int64, turn, steps int, intended, sent, first, end int64, tools ...latency.ToolSpan) latency.Record {
	r := latency.Record{Schema: latency.RecordSchema, ID: "r", Stream: true, Session: session, Turn: turn, Steps: steps,
		IntendedNS: intended * msNS, SentNS: sent * msNS, FirstTokenNS: first * msNS, EndNS: end * msNS,
		ChunkNS: []int64{first * msNS, end * msNS}, OutputTokens: 2}
	for _, t := range tools {
		t.StartNS, t.EndNS = t.StartNS*msNS, t.EndNS*msNS
		r.Tools = append(r.Tools, t)
	}
	return r
}

// agentRecords is a run of four sessions: 1 complete with sequential
// tools, 2 complete without, 3 failed at its second step, 4 cut short.
func agentRecords(parallel bool) []latency.Record {
	t1 := latency.ToolSpan{Name: "search", StartNS: 31, EndNS: 81}
	t2 := latency.ToolSpan{Name: "fetch", StartNS: 81, EndNS: 111}
	shift := int64(0)
	if parallel {
		t2.StartNS, t2.EndNS = 31, 61
		shift = 30
	}
	s1 := step(1, 1, 2, 0, 1, 11, 31, t1, t2)
	s1.ToolsParallel = parallel
	fail := step(3, 2, 2, 50, 50, 60, 70, latency.ToolSpan{Name: "search", StartNS: 70, EndNS: 370, ErrorKind: latency.FailToolTimeout, Error: "no answer within 300ms"})
	fail.ErrorKind, fail.Error = latency.FailToolTimeout, "step 2: tool call 0 (search): no answer within 300ms"
	return []latency.Record{
		s1,
		step(2, 1, 1, 10, 10, 20, 40),
		step(3, 1, 2, 0, 0, 10, 40, latency.ToolSpan{Name: "search", StartNS: 40, EndNS: 45}),
		step(1, 2, 2, 116-shift, 117-shift, 127-shift, 157-shift),
		fail,
		step(4, 1, 3, 500, 500, 510, 520),
	}
}

func collectRecs(recs []latency.Record) *Collector {
	c := NewCollector(Options{})
	for i := range recs {
		c.Add(&recs[i])
	}
	return c
}

// Session 1's 157 ms split by hand: TTFT (11−1)+(127−117) = 20, decode
// 20+30 = 50, tools 111−31 = 80, waits (1−0)+(117−111) = 7; parallel
// calls would save 80 − 50 = 30; its tool-calling step's model time is 30.
func TestSessionsSplitByHand(t *testing.T) {
	s := collectRecs(agentRecords(false)).Report().Sessions
	if s == nil {
		t.Fatal("no sessions")
	}
	d := func(v float64) SessionDist { return SessionDist{Mean: v, P50: v, P95: v, P99: v, Max: v} }
	want := &Sessions{Sessions: 2, Failed: 1, Incomplete: 1, Steps: 1.5,
		Failures: []SessionFailure{{Session: 3, Step: 2, ErrorKind: latency.FailToolTimeout,
			Error: "step 2: tool call 0 (search): no answer within 300ms"}},
		Latency: SessionDist{Mean: (157 + 30) / 2.0, P50: 30, P95: 157, P99: 157, Max: 157},
		Components: []SessionComponent{
			{Name: PartTTFT, SessionDist: SessionDist{Mean: 15, P50: 10, P95: 20, P99: 20, Max: 20}, Share: 15 / 93.5},
			{Name: PartDecode, SessionDist: SessionDist{Mean: 35, P50: 20, P95: 50, P99: 50, Max: 50}, Share: 35 / 93.5},
			{Name: PartTools, SessionDist: SessionDist{Mean: 40, P50: 0, P95: 80, P99: 80, Max: 80}, Share: 40 / 93.5},
			{Name: PartOverhead, SessionDist: d(0)},
			{Name: PartWait, SessionDist: SessionDist{Mean: 3.5, P50: 0, P95: 7, P99: 7, Max: 7}, Share: 3.5 / 93.5},
		},
		CriticalPaths: []CriticalPath{
			{Which: "median", Session: 2, TotalMS: 30, Segments: []Segment{{1, PartTTFT, "", 10}, {1, PartDecode, "", 20}}},
			{Which: "slowest", Session: 1, TotalMS: 157, Segments: []Segment{
				{1, PartWait, "", 1}, {1, PartTTFT, "", 10}, {1, PartDecode, "", 20},
				{1, PartTools, "search", 50}, {1, PartTools, "fetch", 30},
				{2, PartWait, "", 6}, {2, PartTTFT, "", 10}, {2, PartDecode, "", 30}}},
		},
		ParallelTools: &WhatIf{Basis: "simulated", Saving: SessionDist{Mean: 15, P50: 0, P95: 30, P99: 30, Max: 30},
			Before: SessionDist{Mean: 93.5, P50: 30, P95: 157, P99: 157, Max: 157},
			After:  SessionDist{Mean: 78.5, P50: 30, P95: 127, P99: 127, Max: 127}},
		FasterModel: &WhatIf{Basis: "bound", Saving: SessionDist{Mean: 15, P50: 0, P95: 30, P99: 30, Max: 30},
			Before: SessionDist{Mean: 93.5, P50: 30, P95: 157, P99: 157, Max: 157},
			After:  SessionDist{Mean: 78.5, P50: 30, P95: 127, P99: 127, Max: 127}},
	}
	opts := []cmp.Option{cmpopts.EquateApprox(0, 1e-9), cmpopts.IgnoreFields(WhatIf{}, "Note")}
	if diff := cmp.Diff(want, s, opts...); diff != "" {
		t.Errorf("sessions (-want +got):\n%s", diff)
	}
}

// The parts of every session sum to its latency, and the application's
// and gateway's stages are taken out of TTFT.
func TestSessionOverheadFromThePath(t *testing.T) {
	r := step(7, 1, 1, 0, 0, 40, 60)
	r.Timing = []latency.HopStage{{Hop: latency.HopApp, Name: "retrieval", NS: 12 * msNS}, {Hop: latency.HopApp, Name: "upstream", NS: 45 * msNS},
		{Hop: latency.HopServer, Name: string(latency.TimingPrefill), NS: 20 * msNS}, {Hop: latency.HopServer, Name: string(latency.TimingServerDecode), NS: 20 * msNS}}
	p, ok := r.Path()
	if !ok {
		t.Fatal("no path")
	}
	var app int64
	for _, part := range p.Parts {
		if part.Hop == latency.HopApp {
			app += part.NS
		}
	}
	if app == 0 {
		t.Fatalf("the app claims nothing on the path: %+v", p)
	}
	s := collectRecs([]latency.Record{r}).Report().Sessions
	got := map[string]float64{}
	var sum float64
	for _, c := range s.Components {
		got[c.Name] = c.Mean
		sum += c.Mean
	}
	if got[PartOverhead] != float64(app)/msNS || got[PartTTFT] != 40-float64(app)/msNS || sum != 60 {
		t.Errorf("parts %v (app %d ns on the path), sum %v want 60", got, app, sum)
	}
}

// report --compare of a sequential and a parallel run measures the saving
// session by session.
func TestCompareSessions(t *testing.T) {
	c := Compare(collectRecs(agentRecords(false)), collectRecs(agentRecords(true)))
	rows := map[string]CompareRow{}
	for _, r := range c.Rows {
		rows[r.Metric+" "+r.Stat] = r
	}
	if r := rows["session p99"]; r.A != 157 || r.B != 127 || r.Delta != -30 {
		t.Errorf("session p99 row %+v", r)
	}
	if r := rows["session.tools p99"]; r.A != 80 || r.B != 50 {
		t.Errorf("tools p99 row %+v", r)
	}
	var buf bytes.Buffer
	if err := c.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "session.llm_decode") || !strings.Contains(buf.String(), "session rows:") {
		t.Errorf("compare text:\n%s", buf.String())
	}
}

// Records with tool spans survive the file: the reader keeps them.
func TestSessionsFromFile(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	for _, r := range agentRecords(false) {
		b, _ := json.Marshal(r)
		buf.Write(append(b, '\n'))
	}
	if err := os.WriteFile(filepath.Join(dir, "requests.jsonl"), buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := Load(context.Background(), []string{dir}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := collectRecs(agentRecords(false)).Report().Sessions
	if diff := cmp.Diff(want, rep.Sessions); diff != "" {
		t.Errorf("sessions read from a file differ (-in memory +file):\n%s", diff)
	}
	var txt, page bytes.Buffer
	if err := rep.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`<h2 id="sessions">`, "session 3 failed at step 2", "1:tools search 50.0ms → 1:tools fetch 30.0ms", "parallel tool calls (simulated)"} {
		if !strings.Contains(page.String(), s) {
			t.Errorf("HTML lacks %q", s)
		}
	}
	for _, s := range []string{"SESSIONS  2 complete sessions", "session 3 failed at step 2: tool_timeout", "1:tools search 50.0ms → 1:tools fetch 30.0ms", "parallel tool calls (simulated): saves"} {
		if !strings.Contains(txt.String(), s) {
			t.Errorf("text lacks %q:\n%s", s, txt.String())
		}
	}
}
