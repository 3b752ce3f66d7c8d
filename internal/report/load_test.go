package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/stats"
)

func writeRecords(t *testing.T, dir string, reqs []synthReq, tail string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for i, s := range reqs {
		line, err := json.Marshal(s.record(i))
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	b.WriteString(tail)
	path := filepath.Join(dir, results.RequestsFile)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadTruncatedLastLine(t *testing.T) {
	dir := t.TempDir()
	writeRecords(t, dir, baseline(20, 10, 1), `{"v":1,"id":"cut","sent_ns":12,"chunk_ns":[1,2,`)
	rep, err := Load(context.Background(), []string{dir}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Summary.Requests != 20 {
		t.Errorf("kept %d records, want the 20 complete ones", rep.Summary.Requests)
	}
	if !containsNote(rep, "dropped the incomplete last line 21") || !containsNote(rep, "20 complete records") {
		t.Errorf("notes do not say what was dropped: %q", rep.Notes)
	}
}

func TestLoadMalformedLineIsSkippedAndSaid(t *testing.T) {
	dir := t.TempDir()
	path := writeRecords(t, dir, baseline(5, 10, 1), "")
	b, _ := os.ReadFile(path)
	lines := strings.SplitAfter(string(b), "\n")
	bad := strings.Join(lines[:2], "") + "not json\n" + strings.Join(lines[2:], "")
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := Load(context.Background(), []string{path}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Summary.Requests != 5 || !containsNote(rep, "skipped 1 malformed line(s) (lines 3)") {
		t.Errorf("requests %d, notes %q", rep.Summary.Requests, rep.Notes)
	}
}

func TestLoadNewerSchemaIsRefused(t *testing.T) {
	dir := t.TempDir()
	writeRecords(t, dir, baseline(3, 10, 1), `{"v":99,"id":"future","sent_ns":1}`+"\n")
	_, err := Load(context.Background(), []string{dir}, Options{})
	if err == nil || !strings.Contains(err.Error(), "schema v99 is newer") || !strings.Contains(err.Error(), "line 4") {
		t.Fatalf("err = %v, want a refusal naming the schema and line", err)
	}
}

func TestLoadNoRecords(t *testing.T) {
	empty := t.TempDir()
	if err := os.WriteFile(filepath.Join(empty, results.RequestsFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	noFile := t.TempDir()
	for _, tc := range []struct{ path, want string }{
		{empty, "file is empty"},
		{noFile, "no requests.jsonl in it"},
		{filepath.Join(noFile, "missing"), "no such file"},
	} {
		_, err := Load(context.Background(), []string{tc.path}, Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.path, err, tc.want)
		}
		if tc.want != "no such file" && !errors.Is(err, ErrNoRecords) {
			t.Errorf("%s: err %v does not wrap ErrNoRecords", tc.path, err)
		}
	}
}

// TestLoadOnlyGarbage: a file whose every line is unreadable is not
// called empty: the error says how many lines could not be read and why.
func TestLoadOnlyGarbage(t *testing.T) {
	for _, tc := range []struct{ name, data, want string }{
		{"three lines", "hello\nnot json\n{\"id\":\n", "3 lines could not be read as records (line 1: invalid character 'h'"},
		{"last line without newline", "hello\nworld", "2 lines could not be read as records (line 1: invalid character 'h'"},
		{"one line", "[1,2]\n", "1 line could not be read as a record (line 1: json: cannot unmarshal array"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, results.RequestsFile), []byte(tc.data), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Load(context.Background(), []string{dir}, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "empty") || !errors.Is(err, ErrNoRecords) {
				t.Fatalf("err = %v, want ErrNoRecords saying %q", err, tc.want)
			}
		})
	}
}

func TestOnlyErrorsGivesPartialReport(t *testing.T) {
	reqs := baseline(10, 10, 1)
	for i := range reqs {
		reqs[i].err = latency.FailConnect
	}
	c := NewCollector(Options{SLOs: mustSLOs(t, "ttft:p99<=1s")})
	for i, s := range reqs {
		c.Add(s.record(i))
	}
	rep := c.Report()
	if rep.Summary.Failed != 10 || rep.Summary.Errors[string(latency.FailConnect)] != 10 {
		t.Errorf("summary %+v", rep.Summary)
	}
	if !containsNote(rep, "no successful requests (10 failed)") {
		t.Errorf("notes %q", rep.Notes)
	}
	if rep.SLOs[0].Status != "no data" || rep.AllSLOs.Status != "fail" || rep.AllSLOs.Attainment != 0 {
		t.Errorf("verdicts %+v %+v", rep.SLOs, rep.AllSLOs)
	}
	var b bytes.Buffer
	for _, w := range []func(*bytes.Buffer) error{
		func(b *bytes.Buffer) error { return rep.WriteText(b) }, func(b *bytes.Buffer) error { return rep.WriteMarkdown(b) },
		func(b *bytes.Buffer) error { return rep.WriteJSON(b) }, func(b *bytes.Buffer) error { return c.WriteCSV(b) },
		func(b *bytes.Buffer) error { return rep.WriteHTML(b) },
	} {
		b.Reset()
		if err := w(&b); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), "connect") {
			t.Errorf("output does not name the error kind:\n%s", b.String())
		}
	}
}

func TestLoadSweepFolderAndRunInfo(t *testing.T) {
	root := t.TempDir()
	for i, rate := range []float64{5, 10, 20} {
		reqs := baseline(100, rate, uint64(i))
		for j := range reqs {
			reqs[j].phase = "rate=" + []string{"5", "10", "20"}[i]
		}
		dir := filepath.Join(root, []string{"a-5", "b-10", "c-20"}[i])
		writeRecords(t, dir, reqs, "")
		if err := results.WriteRunInfo(dir, results.RunInfo{OfferedRate: rate, Points: []results.SweepPoint{{Phase: reqs[0].phase, OfferedRate: rate}}}); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := Load(context.Background(), []string{root}, Options{SLOs: mustSLOs(t, "ttft:p99<=1s")})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Sources) != 3 || len(rep.Runs) != 3 || len(rep.Phases) != 3 {
		t.Fatalf("sources %d runs %d phases %d", len(rep.Sources), len(rep.Runs), len(rep.Phases))
	}
	if rep.Phases[0].OfferedRPS != 5 || rep.Phases[2].OfferedRPS != 20 || rep.Capacity == nil || rep.Capacity.RPS != 20 {
		t.Errorf("phases %+v capacity %+v", rep.Phases, rep.Capacity)
	}
}

func TestRunInfoBadJSONIsANote(t *testing.T) {
	dir := t.TempDir()
	writeRecords(t, dir, baseline(5, 10, 1), "")
	if err := os.WriteFile(filepath.Join(dir, results.RunInfoFile), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := Load(context.Background(), []string{dir}, Options{})
	if err != nil || !containsNote(rep, "run metadata ignored") {
		t.Fatalf("err %v notes %q", err, rep.Notes)
	}
}

func containsNote(rep *Report, s string) bool {
	for _, n := range rep.Notes {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

func FuzzReadRecords(f *testing.F) {
	var b bytes.Buffer
	for i, s := range baseline(3, 10, 1) {
		line, _ := json.Marshal(s.record(i))
		b.Write(line)
		b.WriteByte('\n')
	}
	f.Add(b.Bytes())
	f.Add([]byte(`{"v":1,"id":"x","sent_ns":5,"end_ns":1,"first_token_ns":3,"output_tokens":-4,"chunk_ns":[9,1]}` + "\n"))
	f.Add([]byte(`{"v":1,"error_kind":"timeout"}` + "\n{"))
	f.Add([]byte("\n\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := NewCollector(Options{Resamples: 20, SLOs: []latency.SLO{{Metric: latency.ITL, Percentile: 99, Max: 1}}})
		if _, _, err := readRecords(context.Background(), c, bytes.NewReader(data), "fuzz", int64(len(data))); err != nil {
			return
		}
		rep := c.Report()
		var out bytes.Buffer
		if err := rep.WriteText(&out); err != nil {
			t.Fatal(err)
		}
		if err := rep.WriteJSON(&out); err != nil {
			t.Fatal(err)
		}
	})
}

// Past the exact cap, gaps move to histograms, batch by batch in parallel,
// and the percentiles stay within the histogram's resolution.
func TestLoadGapsPastExactCap(t *testing.T) {
	dir := t.TempDir()
	writeRecords(t, dir, baseline(3000, 10, 4), "")
	exact, err := Load(context.Background(), []string{dir}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func(c, b int) { itlExactCap, readBlock = c, b }(itlExactCap, readBlock)
	itlExactCap, readBlock = 1000, 16<<10 // many blocks, most reduced after the switch
	approx, err := Load(context.Background(), []string{dir}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	e, a := exact.dist("itl"), approx.dist("itl")
	if e.Approx || !a.Approx || e.Count != a.Count {
		t.Fatalf("exact %+v\napprox %+v", e, a)
	}
	for _, pair := range [][2]float64{{e.P50, a.P50}, {e.P99, a.P99}, {e.Max, a.Max}, {e.Mean, a.Mean}} {
		if d := (pair[1] - pair[0]) / pair[0]; d > 0.0005 || d < -0.0005 {
			t.Errorf("histogram value %v vs exact %v", pair[1], pair[0])
		}
	}
}

func TestLoadCanceled(t *testing.T) {
	dir := t.TempDir()
	writeRecords(t, dir, baseline(50, 10, 1), "")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Load(ctx, []string{dir}, Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

// The collector's inter-token gaps are exactly latency.Record.ITLs and ICLs.
func TestCollectorGapsMatchRecord(t *testing.T) {
	recs := []*latency.Record{
		{Schema: 1, ID: "a", FirstTokenNS: 10, EndNS: 100, OutputTokens: 7, ChunkNS: []int64{10, 20, 50, 58},
			ChunkTokens: []int32{2, 1, 3, 1}},
		{Schema: 1, ID: "b", FirstTokenNS: 5, EndNS: 50, OutputTokens: 4, ChunkNS: []int64{5, 15, 16, 40},
			ChunkTokens: []int32{1, 0, 2, 1}},
		{Schema: 1, ID: "c", FirstTokenNS: 1, EndNS: 9, OutputTokens: 3, ChunkNS: []int64{1, 4, 8}},
		{Schema: 1, ID: "d", ErrorKind: latency.FailStreamCut, ChunkNS: []int64{1, 900}},
	}
	c := NewCollector(Options{})
	var itl, icl []int64
	for _, r := range recs {
		c.Add(r)
		if r.OK() {
			itl = r.ITLs(itl)
			icl = r.ICLs(icl)
		}
	}
	if diff := cmp.Diff(itl, c.itl.Values()); diff != "" {
		t.Errorf("ITL (-record +collector):\n%s", diff)
	}
	if diff := cmp.Diff(icl, c.icl.Values()); diff != "" {
		t.Errorf("ICL (-record +collector):\n%s", diff)
	}
	for i, r := range recs[:3] {
		want, _ := r.Value(latency.ITL)
		if got := c.rows[i].itlMax; got != int64(want) {
			t.Errorf("%s: max ITL %d, want %d", r.ID, got, want)
		}
		if got := c.rows[i].stall; got != int64(r.MaxStall()) {
			t.Errorf("%s: stall %d, want %d", r.ID, got, r.MaxStall())
		}
	}
}

func TestForeseen(t *testing.T) {
	tests := []struct {
		name       string
		size, read int64
		rows, want int
	}{
		{"size unknown", 0, 4 << 20, 1000, 0},
		{"nothing read yet", 100, 0, 0, 0},
		{"a quarter read", 4000, 1000, 10, 31},      // 10 × 3000/1000 × 1.05
		{"half read", 8 << 20, 4 << 20, 1700, 1785}, // 1700 × 1.05
		{"all read", 1000, 1000, 7, 0},
		{"more read than the size said", 1000, 1200, 7, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := merger{size: tt.size, read: tt.read, rows: tt.rows}
			if got := m.foreseen(); got != tt.want {
				t.Errorf("foreseen() = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestGrowTo(t *testing.T) {
	tests := []struct {
		name              string
		len, cap, n, more int
		wantCap           int
	}{
		{"room enough: unchanged", 3, 10, 7, 100, 10},
		{"exactly n + more", 3, 4, 2, 5, 10},
		{"nothing foreseen: append's step", 3, 4, 2, 0, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := make([]int64, tt.len, tt.cap)
			for i := range s {
				s[i] = int64(i + 1)
			}
			got := growTo(s, tt.n, tt.more)
			if diff := cmp.Diff(s, got); diff != "" {
				t.Errorf("contents changed (-before +after):\n%s", diff)
			}
			if cap(got) != tt.wantCap {
				t.Errorf("cap = %d, want %d", cap(got), tt.wantCap)
			}
		})
	}
}

// Past the exact cap, the gaps read from a file go to histograms: a record
// of one-token chunks counts its gaps once for both ITL and ICL, a record of
// larger chunks each separately; either way the histograms are those of
// latency.Record.ITLs and ICLs.
func TestReadGapHistogramsMatchRecords(t *testing.T) {
	defer func(c, b int) { itlExactCap, readBlock = c, b }(itlExactCap, readBlock)
	itlExactCap, readBlock = 500, 8<<10
	var data []byte
	var itl, icl stats.Histogram
	for i := range 400 {
		r := latency.Record{Schema: 1, ID: fmt.Sprint("r", i), Stream: true, SentNS: 1, FirstTokenNS: 100, OutputTokens: 5}
		for k := range 5 {
			r.ChunkNS = append(r.ChunkNS, 100+int64(k*(1000+i*37+k*k*5)))
		}
		if i%3 == 0 {
			r.ChunkTokens, r.OutputTokens = []int32{1, 3, 1, 2, 1}, 8
		}
		r.EndNS = r.ChunkNS[4] + 10
		for _, v := range r.ITLs(nil) {
			itl.Add(v)
		}
		for _, v := range r.ICLs(nil) {
			icl.Add(v)
		}
		line, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		data = append(append(data, line...), '\n')
	}
	c := NewCollector(Options{})
	if _, _, err := readRecords(context.Background(), c, bytes.NewReader(data), "gaps", int64(len(data))); err != nil {
		t.Fatal(err)
	}
	for _, g := range []struct {
		name string
		want *stats.Histogram
		got  *stats.Sample
	}{{"itl", &itl, &c.itl}, {"icl", &icl, &c.icl}} {
		h := g.got.Hist()
		if h == nil {
			t.Fatalf("%s: still exact after %d gaps", g.name, g.got.Count())
		}
		type summary struct{ N, Sum, Min, Max int64 }
		if diff := cmp.Diff(summary{g.want.Count(), g.want.Sum(), g.want.Min(), g.want.Max()},
			summary{h.Count(), h.Sum(), h.Min(), h.Max()}); diff != "" {
			t.Errorf("%s (-record +collector):\n%s", g.name, diff)
		}
		for p := 1.0; p <= 100; p++ {
			if w, got := g.want.Percentile(p), h.Percentile(p); w != got {
				t.Errorf("%s: P%v = %d, want %d", g.name, p, got, w)
			}
		}
	}
}

// TestLoadLongLines: one line longer than a block is read in buffers that
// grow geometrically (not a block at a time: quadratic); a line over the
// line bound is skipped to its end, counted unreadable, and the records
// after it are read; a reader that never ends a line stops when the
// context ends.
func TestLoadLongLines(t *testing.T) {
	defer func(b, m int) { readBlock, maxRecordLine = b, m }(readBlock, maxRecordLine)
	readBlock, maxRecordLine = 1<<10, 8<<20
	var good bytes.Buffer
	for i, s := range baseline(2, 10, 1) {
		line, _ := json.Marshal(s.record(i))
		good.Write(append(line, '\n'))
	}
	long := append(bytes.Repeat([]byte(" "), 4<<20), good.Bytes()[:bytes.IndexByte(good.Bytes(), '\n')+1]...) // 4 MiB: under the bound
	over := append(bytes.Repeat([]byte{0}, 9<<20), '\n')                                                      // over it
	for _, c := range []struct {
		name       string
		data       []byte
		records    int
		unreadable int
		allocBelow uint64
	}{
		{"a long line under the bound", append(append([]byte(nil), long...), good.Bytes()...), 3, 0, 64 << 20},
		{"a line over the bound", append(append(append([]byte(nil), good.Bytes()...), over...), good.Bytes()...), 4, 1, 64 << 20},
		{"over the bound at the end", append(append([]byte(nil), good.Bytes()...), over[:len(over)-1]...), 2, 1, 64 << 20},
	} {
		c := c
		col := NewCollector(Options{})
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		n, un, err := readRecords(context.Background(), col, bytes.NewReader(c.data), "long", int64(len(c.data)))
		runtime.ReadMemStats(&after)
		if err != nil || n != c.records || un.lines != c.unreadable {
			t.Errorf("%s: %d records, %d unreadable (%s), err %v; want %d, %d", c.name, n, un.lines, un.why, err, c.records, c.unreadable)
		}
		if c.unreadable > 0 && !strings.Contains(un.why, "longer than 8 MiB") {
			t.Errorf("%s: unreadable because %q, want the line bound named", c.name, un.why)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > c.allocBelow {
			t.Errorf("%s: allocated %d MiB reading %d MiB", c.name, got>>20, len(c.data)>>20)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	endless := &endlessLine{after: 32 << 20, cancel: cancel}
	if _, _, err := readRecords(ctx, NewCollector(Options{}), endless, "endless", 0); !errors.Is(err, context.Canceled) {
		t.Errorf("a line without end, the context cancelled: err %v, want context.Canceled", err)
	}
}

// endlessLine is a line that never ends; it cancels after so many bytes.
type endlessLine struct {
	read, after int
	cancel      func()
}

func (e *endlessLine) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	if e.read += len(p); e.read > e.after {
		e.cancel()
	}
	return len(p), nil
}
