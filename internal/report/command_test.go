package report

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunFormats(t *testing.T) {
	dir := t.TempDir()
	writeRecords(t, dir, baseline(50, 10, 1), "")
	for _, format := range []string{"text", "md", "json", "csv"} {
		var out bytes.Buffer
		if err := Run(context.Background(), Config{Paths: []string{dir}, Format: format}, &out); err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		switch format {
		case "json":
			var rep Report
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil || rep.Schema != Schema || rep.Summary.Requests != 50 {
				t.Errorf("json: %v %+v", err, rep.Summary)
			}
		case "csv":
			rows, err := csv.NewReader(&out).ReadAll()
			if err != nil || len(rows) != 51 || len(rows[0]) != len(csvHeader) {
				t.Fatalf("csv: %v, %d rows", err, len(rows))
			}
			// Row 1 is request 0 of baseline: e2e_intended equals the sum of its stages.
			col := func(name string) int {
				for i, h := range rows[0] {
					if h == name {
						return i
					}
				}
				t.Fatalf("no column %s", name)
				return -1
			}
			if rows[1][col("ok")] != "true" || rows[1][col("server_queue_ms")] == "" || rows[1][col("unattributed_ms")] != "" {
				t.Errorf("csv row: %v", rows[1])
			}
		default:
			if !strings.Contains(out.String(), "tokentrace report") {
				t.Errorf("%s output: %s", format, out.String())
			}
		}
	}
	// html goes to report.html in the results folder and says so.
	var out bytes.Buffer
	if err := Run(context.Background(), Config{Paths: []string{dir}, Format: "html"}, &out); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, "report.html")
	if !strings.Contains(out.String(), want) {
		t.Errorf("html: printed %q, want the path %s", out.String(), want)
	}
	if b, err := os.ReadFile(want); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Errorf("report.html: %v", err)
	}
	if err := Run(context.Background(), Config{Paths: []string{dir}, Format: "pdf"}, &out); err == nil ||
		!strings.Contains(err.Error(), "unknown format") {
		t.Errorf("unknown format: %v", err)
	}
	if err := Run(context.Background(), Config{Paths: []string{dir}, Compare: true}, &out); err == nil ||
		!strings.Contains(err.Error(), "exactly two") {
		t.Errorf("compare with one run: %v", err)
	}
}

// Two runs of the same workload with different seeds differ only by noise;
// a run whose prefill is 40 ms slower differs beyond its interval.
func TestCompare(t *testing.T) {
	root := t.TempDir()
	a, same, slow := filepath.Join(root, "a"), filepath.Join(root, "same"), filepath.Join(root, "slow")
	writeRecords(t, a, baseline(400, 10, 1), "")
	writeRecords(t, same, baseline(400, 10, 2), "")
	slower := baseline(400, 10, 3)
	for i := range slower {
		slower[i].prefill += 40
	}
	writeRecords(t, slow, slower, "")
	load := func(p string) *Report {
		r, err := Load(context.Background(), []string{p}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	row := func(c *Comparison, metric, stat string) CompareRow {
		for _, r := range c.Rows {
			if r.Metric == metric && r.Stat == stat {
				return r
			}
		}
		t.Fatalf("no row %s %s", metric, stat)
		return CompareRow{}
	}
	c := Compare(load(a), load(same))
	if r := row(c, "prefill", "p50"); r.Significant || !r.HasCI || r.CI[0] > 0 || r.CI[1] < 0 {
		t.Errorf("same workload: %+v", r)
	}
	c = Compare(load(a), load(slow))
	for _, m := range []string{"ttft", "prefill"} {
		r := row(c, m, "p50")
		if !r.Significant || r.Delta < 30 || r.Delta > 50 {
			t.Errorf("%s: 40 ms slower prefill: %+v", m, r)
		}
	}
	if r := row(c, "decode", "p50"); r.Significant && (r.Delta > 100 || r.Delta < -100) {
		t.Errorf("decode did not change: %+v", r)
	}
	var out bytes.Buffer
	if err := Run(context.Background(), Config{Paths: []string{a, slow}, Compare: true}, &out); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if len([]rune(line)) > 100 {
			t.Errorf("compare line too wide: %q", line)
		}
	}
	if !strings.Contains(out.String(), "YES") {
		t.Errorf("compare text marks no difference beyond its CI:\n%s", out.String())
	}
	for _, f := range []string{"md", "json", "html"} {
		out.Reset()
		if err := Run(context.Background(), Config{Paths: []string{a, slow}, Compare: true, Format: f,
			Output: filepath.Join(root, "cmp."+f)}, &out); err != nil {
			t.Fatalf("compare %s: %v", f, err)
		}
	}
}
