package report_test

import (
	"encoding/csv"
	"encoding/json"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/openaitest"
	"github.com/tokentrace/tokentrace/internal/report"
)

// stageServer is an OpenAI-compatible server that names stages of its
// own no engine has, in one of Server-Timing's three forms: the header,
// the trailer, or the final SSE comment before [DONE]. Its first token
// comes 25 ms after the request, its last about 10 ms later.
func stageServer(t *testing.T, form, timing string) string {
	t.Helper()
	u := &openaitest.Upstream{Name: "stages", TTFT: 25 * time.Millisecond, Gap: 3 * time.Millisecond, Chunks: 4,
		UsageChunk: true, PromptTokens: 8, Timing: timing}
	if form != "trailer" {
		u.TimingIn = form
	}
	return openaitest.Start(t, u).URL()
}

// A server reporting stages tokentrace does not know — retrieval, rerank,
// a guardrail — in the header, the trailer or the final event: every
// output format shows each under the server's hop with its value, and the
// parts of every group sum to its total; compare shows a stage only one
// run has as such.
func TestUnknownStagesInEveryFormat(t *testing.T) {
	if testing.Short() {
		t.Skip("runs bench against a test server (about 3 s)")
	}
	const timing = "retrieval;dur=12.5, rerank;dur=4, guardrail;dur=3"
	want := map[string]float64{"retrieval": 12.5, "rerank": 4, "guardrail": 3}
	dirs := map[string]string{}
	for _, form := range []string{"header", "trailer", "final"} {
		dir := filepath.Join(t.TempDir(), form)
		dirs[form] = dir
		out, err := tokentrace(t, "bench", "--url", stageServer(t, form, timing), "--rate", "40", "--requests", "30",
			"--output-tokens", "4", "--input-tokens", "8", "--no-calibration", "--output-dir", dir, "--seed", "3")
		if err != nil {
			t.Fatalf("%s: bench: %v\n%s", form, err, out)
		}
		js, err := tokentrace(t, "report", dir, "--format", "json")
		if err != nil {
			t.Fatalf("%s: report: %v\n%s", form, err, js)
		}
		var rep report.Report
		if err := json.Unmarshal([]byte(js), &rep); err != nil {
			t.Fatal(err)
		}
		for _, d := range []*report.Decomposition{rep.Decomposition, rep.TTFTSplit} {
			for _, g := range d.Groups {
				var sum float64
				got := map[string]float64{}
				for _, s := range g.Stages {
					sum += s.MeanMS
					if s.Hop == "server" {
						got[s.Stage] = s.MeanMS
					}
				}
				if math.Abs(sum-g.TotalMS) > 1e-6*g.TotalMS {
					t.Errorf("%s: %s %s: parts sum to %.6f ms, total %.6f ms", form, d.Of, g.Name, sum, g.TotalMS)
				}
				for name, v := range want {
					if math.Abs(got[name]-v) > 1e-9 {
						t.Errorf("%s: %s %s: server %s %.3f ms, want %.3f (stages %+v)", form, d.Of, g.Name, name, got[name], v, g.Stages)
					}
				}
			}
		}
		for _, f := range []struct{ format, needle string }{
			{"text", "retrieval"}, {"text", "12.5ms"}, {"md", "| retrieval | 12.5ms"}, {"md", "| guardrail | 3.00ms"},
			{"html", "<td>rerank</td><td>4.00ms"},
		} {
			out, err := tokentrace(t, "report", dir, "--format", f.format, "--output", "-")
			if err != nil || !strings.Contains(out, f.needle) {
				t.Errorf("%s: report --format %s lacks %q (%v):\n%s", form, f.format, f.needle, err, out)
			}
		}
		out, err = tokentrace(t, "report", dir, "--format", "csv")
		if err != nil {
			t.Fatal(err)
		}
		rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
		if err != nil || len(rows) < 2 {
			t.Fatalf("%s: csv: %v", form, err)
		}
		for name, v := range want {
			c := -1
			for i, h := range rows[0] {
				if h == "path.server."+name+"_ms" {
					c = i
				}
			}
			if c < 0 || rows[1][c] != strconv.FormatFloat(v, 'f', 3, 64) {
				t.Errorf("%s: csv column path.server.%s_ms: %v", form, name, rows[0])
			}
		}
	}
	// B's server names no guardrail: compare says the stage is only in A.
	dirB := filepath.Join(t.TempDir(), "b")
	if out, err := tokentrace(t, "bench", "--url", stageServer(t, "header", "retrieval;dur=6, rerank;dur=4"), "--rate", "40",
		"--requests", "30", "--output-tokens", "4", "--input-tokens", "8", "--no-calibration", "--output-dir", dirB, "--seed", "3"); err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	js, err := tokentrace(t, "report", "--compare", dirs["header"], dirB, "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var c report.Comparison
	if err := json.Unmarshal([]byte(js), &c); err != nil {
		t.Fatal(err)
	}
	found := map[string]report.CompareRow{}
	for _, r := range c.Rows {
		if r.Stat == "p50" {
			found[r.Metric] = r
		}
	}
	if r := found["server.guardrail"]; r.Only != "a" || r.A != 3 {
		t.Errorf("guardrail, in A only: %+v", r)
	}
	if r := found["server.retrieval"]; r.Only != "" || r.A != 12.5 || r.B != 6 || r.Delta != -6.5 {
		t.Errorf("retrieval in both: %+v", r)
	}
	text, err := tokentrace(t, "report", "--compare", dirs["header"], dirB)
	if err != nil || !strings.Contains(text, "only in A") {
		t.Errorf("compare text does not say guardrail is only in A (%v):\n%s", err, text)
	}
	t.Logf("\n%s", text)
	rep, err := tokentrace(t, "report", dirs["final"])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", rep)
}
