package report

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"reflect"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/window"
)

// phaseRun is a run of a request every 100 ms for 120 s, 10 output tokens
// 10 ms apart, whose TTFT is 100 ms except for the requests sent in
// [slowFrom, slowTo) s, whose TTFT is 400 ms.
func phaseRun(slowFrom, slowTo float64) []synthReq {
	var out []synthReq
	for i := range 1200 {
		at := float64(i) * 100
		net := 100.0
		if at >= slowFrom*1000 && at < slowTo*1000 {
			net = 400
		}
		out = append(out, synthReq{at: at, net: net, tpot: 10, input: 100, output: 10})
	}
	return out
}

// TestTailPhaseKnownAnswer: a run whose second half is slower names the
// phase with its time. The windows are 8 s (120.39 s does not fit in 30 of
// 1, 2 or 4 s); the window [56 s, 64 s) holds the first slow requests
// (sent from 60 s, ended from 60.49 s) beside fast ones, and its P99 is
// theirs, so the phase starts at 0:56; the last request ends at 120.39 s,
// the run's end (2:00). A slow middle third, [40 s, 80 s), ends in the
// window [80 s, 88 s), which holds the last slow request (sent at 79.9 s,
// ended at 80.39 s): 0:40 to 1:28; a slow first third, 0:00 to 0:48.
func TestTailPhaseKnownAnswer(t *testing.T) {
	for _, tt := range []struct {
		name, from, to   string
		slowFrom, slowTo float64
		evidence, title  string
	}{
		{"second half", "0:56", "2:00", 60, 1e9,
			"TTFT P99 rose from 100ms to 400ms from 0:56 to the end of the run (2:00)", "TTFT's tail appears only between 0:56 and 2:00"},
		{"middle third", "0:40", "1:28", 40, 80,
			"TTFT P99 rose from 100ms to 400ms between 0:40 and 1:28", "TTFT's tail appears only between 0:40 and 1:28"},
		{"first third", "0:00", "0:48", 0, 40,
			"TTFT P99 was 400ms between 0:00 and 0:48 and fell to 100ms after", "TTFT's tail appears only between 0:00 and 0:48"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rep := collect(Options{}, phaseRun(tt.slowFrom, tt.slowTo))
			if rep.TimeSeries == nil || rep.TimeSeries.WidthS != 8 || len(rep.TimeSeries.Windows) != 16 {
				t.Fatalf("time series: %+v", rep.TimeSeries)
			}
			i := findingIndex(rep, RuleTailPhase)
			if i < 0 {
				t.Fatalf("no %s finding: %+v", RuleTailPhase, rep.Findings)
			}
			f := rep.Findings[i]
			if !strings.Contains(f.Evidence, tt.evidence) || f.Title != tt.title {
				t.Errorf("finding:\n%s\n%s\nwant %q, %q", f.Title, f.Evidence, tt.title, tt.evidence)
			}
			if f.Numbers["before_p99_ms"] != 100 || f.Numbers["during_p99_ms"] != 400 || f.Numbers["window_s"] != 8 {
				t.Errorf("numbers %v", f.Numbers)
			}
		})
	}
}

// TestTailPhaseNotFound: a steady run, a tail in one window only, and a
// sweep (whose cells differ by design) name no phase.
func TestTailPhaseNotFound(t *testing.T) {
	steady := phaseRun(0, 0)
	for i := range steady {
		steady[i].net += float64(i%7) * 3 // a spread, the same all run long
	}
	spike := phaseRun(60, 62) // slow for 2 s: one 8 s window
	sweep := phaseRun(60, 1e9)
	for i := range sweep {
		sweep[i].phase = map[bool]string{true: "rate=10", false: "rate=20"}[i < 600]
	}
	for name, reqs := range map[string][]synthReq{"steady": steady, "one window": spike, "sweep": sweep} {
		if rep := collect(Options{}, reqs); findingIndex(rep, RuleTailPhase) >= 0 {
			t.Errorf("%s: %+v", name, rep.Findings[findingIndex(rep, RuleTailPhase)])
		}
	}
}

// TestTimeSeriesIsTheWindows: the report's time series is
// internal/window's over the same records, in milliseconds and seconds;
// reading the records from a file (in parallel batches) gives the same.
func TestTimeSeriesIsTheWindows(t *testing.T) {
	reqs := phaseRun(60, 1e9)
	reqs[5].err, reqs[700].err = "http_5xx", "timeout"
	s := window.New(seriesWidth, seriesMax)
	for i, r := range reqs {
		s.Add(r.record(i))
	}
	ws := s.Windows(0)
	rep := collect(Options{}, reqs)
	ts := rep.TimeSeries
	if ts.WidthS != s.Width().Seconds() || len(ts.Windows) != len(ws) {
		t.Fatalf("width %v, %d windows; want %v, %d", ts.WidthS, len(ts.Windows), s.Width(), len(ws))
	}
	for k, w := range ws {
		p := ts.Windows[k]
		if p.StartS != w.Start.Seconds() || p.EndS != w.End.Seconds() || p.Completed != w.Completed || p.Failed != w.Failed ||
			p.Offered != w.Offered || p.InFlight != w.InFlight || p.TTFT != windowDist(w.TTFT) || p.ITL != windowDist(w.ITL) ||
			p.E2E != windowDist(w.E2E) || p.TPOT != windowDist(w.TPOT) {
			t.Errorf("window %d: %+v, want %+v", k, p, w)
		}
	}
	if f := ts.Windows[0].Failures; f["http_5xx"] != 1 {
		t.Errorf("window 0 failures %v", f)
	}
	readBlock := readBlock
	defer func() { readBlockSet(readBlock) }()
	readBlockSet(4 << 10) // many batches
	dir := t.TempDir()
	writeRecords(t, dir, reqs, "")
	loaded, err := Load(context.Background(), []string{dir}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(loaded.TimeSeries, ts) {
		t.Errorf("loaded from a file:\n%+v\nwant\n%+v", loaded.TimeSeries, ts)
	}
}

func readBlockSet(n int) { readBlock = n }

// TestSeriesGaugesAndCSV: the server's scrapes join their windows; the
// CSV has a line per window with the JSON form's numbers.
func TestSeriesGaugesAndCSV(t *testing.T) {
	run := &results.RunInfo{Server: &results.ServerInfo{Series: []string{"running", "waiting"}},
		Samples: []results.ServerSample{{AtNS: 1e9, Running: 2, Waiting: 4}, {AtNS: 3e9, Running: 4, Waiting: 0},
			{AtNS: 9e9, Running: 1, Waiting: 1}}}
	reqs := phaseRun(0, 0)[:100] // 10 s
	rep := collectRun(Options{}, run, reqs)
	ts := rep.TimeSeries
	if ts == nil || ts.WidthS != 1 || !reflect.DeepEqual(ts.Gauges, []string{"waiting", "running"}) {
		t.Fatalf("series %+v", ts)
	}
	if w := ts.Windows[1]; w.Running == nil || *w.Running != 2 || *w.Waiting != 4 || w.KVCacheUsage != nil {
		t.Errorf("window 1: %+v", w)
	}
	if w := ts.Windows[2]; w.Running != nil {
		t.Errorf("window 2 has no scrape: %+v", w)
	}
	var b bytes.Buffer
	if err := rep.WriteSeriesCSV(&b); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1+len(ts.Windows) || !reflect.DeepEqual(rows[0], seriesHeader) {
		t.Fatalf("%d rows, header %v", len(rows), rows[0])
	}
	// Window 1 [1 s, 2 s): the requests sent at 0.8 and 0.9 s end at 1.09
	// and 1.19 s with those sent in [1 s, 1.8 s): 10 completions, 10
	// intended sends, TTFT 100 ms, E2E 190 ms, one scrape.
	want := []string{"1.000", "2.000", "10", "10", "0", "10.000", "10.000"}
	if got := rows[2][:7]; !reflect.DeepEqual(got, want) {
		t.Errorf("window 1 line %v, want %v", got, want)
	}
	if got := rows[2][9:12]; !reflect.DeepEqual(got, []string{"100.000", "100.000", "100.000"}) {
		t.Errorf("TTFT columns %v", got)
	}
	if got := rows[2][24:]; !reflect.DeepEqual(got, []string{"4.000", "2.000", "", ""}) {
		t.Errorf("gauge columns %v", got)
	}
}

// TestBeforeCellLines: what bench did between a sweep's cells, said once
// per action with its count, and each cell's failure, in the Markdown and
// HTML forms.
func TestBeforeCellLines(t *testing.T) {
	rep := &Report{Phases: []Phase{{Name: "rate=1", BeforeCell: "prefix cache reset (POST /reset_prefix_cache)"},
		{Name: "rate=2", BeforeCell: "prefix cache reset (POST /reset_prefix_cache)"},
		{Name: "rate=4", BeforeCellWarning: "POST /reset_prefix_cache: status 503"}}}
	want := []string{"before 2 of 3 cells: prefix cache reset (POST /reset_prefix_cache)",
		"warning: before rate=4: POST /reset_prefix_cache: status 503"}
	if got := rep.BeforeCellLines(); !reflect.DeepEqual(got, want) {
		t.Errorf("lines %q, want %q", got, want)
	}
	var md, html bytes.Buffer
	bw := bufio.NewWriter(&md)
	mdWriter{bw}.phases(rep)
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteHTML(&html); err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if !strings.Contains(md.String(), "- "+w) || !strings.Contains(html.String(), "<li>"+w+"</li>") {
			t.Errorf("%q missing:\n%s", w, md.String())
		}
	}
}
