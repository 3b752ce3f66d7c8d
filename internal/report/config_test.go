package report

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/field"
)

// renderText renders cfg to a buffer.
func renderText(cfg Config) (string, error) {
	r, err := LoadConfig(context.Background(), cfg)
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	err = r.Write(&out)
	return out.String(), err
}

func TestRenderFormats(t *testing.T) {
	dir := t.TempDir()
	writeRecords(t, dir, baseline(50, 10, 1), "")
	for _, format := range []string{"text", "md", "json", "csv", "html"} {
		s, err := renderText(Config{Paths: []string{dir}, Format: format})
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		out := bytes.NewBufferString(s)
		switch format {
		case "json":
			var rep Report
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil || rep.Schema != Schema || rep.Summary.Requests != 50 {
				t.Errorf("json: %v %+v", err, rep.Summary)
			}
		case "csv":
			rows, err := csv.NewReader(out).ReadAll()
			if err != nil || len(rows) != 51 || len(rows[0]) <= len(csvHeader) {
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
			// The path's columns sum to e2e_intended_ms (to rounding).
			var sum float64
			for i := len(csvHeader); i < len(rows[0]); i++ {
				v, err := strconv.ParseFloat(rows[1][i], 64)
				if err != nil {
					t.Fatalf("column %s: %v", rows[0][i], err)
				}
				sum += v
			}
			if e2e, _ := strconv.ParseFloat(rows[1][col("e2e_intended_ms")], 64); math.Abs(sum-e2e) > 0.01 {
				t.Errorf("path columns %v sum to %.3f, want e2e_intended %.3f", rows[0][len(csvHeader):], sum, e2e)
			}
			if col("path.server.prefill_ms") < 0 || col("path.client→server.network_ms") < 0 {
				t.Errorf("no path column")
			}
		case "html":
			if !strings.Contains(out.String(), "<svg") {
				t.Errorf("html output has no chart")
			}
		default:
			if !strings.Contains(out.String(), "tokentrace report") {
				t.Errorf("%s output: %s", format, out.String())
			}
		}
	}
	// html goes to report.html in the results folder (compare.html beside
	// run A); the other formats to standard output.
	if got, want := (Config{Paths: []string{dir}, Format: "html"}).DefaultFile(), filepath.Join(dir, "report.html"); got != want {
		t.Errorf("html goes to %q, want %q", got, want)
	}
	if got, want := (Config{Paths: []string{filepath.Join(dir, "requests.jsonl"), dir}, Compare: true, Format: "HTML"}).DefaultFile(), filepath.Join(dir, "compare.html"); got != want {
		t.Errorf("compare html goes to %q, want %q", got, want)
	}
	if got := (Config{Paths: []string{dir}, Format: "md"}).DefaultFile(); got != "" {
		t.Errorf("md goes to %q, want standard output", got)
	}
	for _, tt := range []struct {
		cfg   Config
		field string
		want  string
	}{
		{Config{Paths: []string{dir}, Format: "pdf"}, "format", "unknown format"},
		{Config{Paths: []string{dir}, Compare: true}, "compare", "exactly two"},
		{Config{Paths: []string{dir, dir}, Compare: true, Format: "csv"}, "format", "comparison"},
	} {
		_, err := renderText(tt.cfg)
		var fe *field.Error
		if !errors.As(err, &fe) || fe.Field != tt.field || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want a field error about %s mentioning %q", tt.cfg, err, tt.field, tt.want)
		}
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
	load := func(p string) *Collector {
		r, err := Collect(context.Background(), []string{p}, Options{})
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
	if r := row(c, "server.prefill", "p50"); r.Significant || !r.HasCI || r.CI[0] > 0 || r.CI[1] < 0 {
		t.Errorf("same workload: %+v", r)
	}
	c = Compare(load(a), load(slow))
	for _, m := range []string{"ttft", "server.prefill"} {
		r := row(c, m, "p50")
		if !r.Significant || r.Delta < 30 || r.Delta > 50 {
			t.Errorf("%s: 40 ms slower prefill: %+v", m, r)
		}
	}
	if r := row(c, "server.decode", "p50"); r.Significant && (r.Delta > 100 || r.Delta < -100) {
		t.Errorf("decode did not change: %+v", r)
	}
	s, err := renderText(Config{Paths: []string{a, slow}, Compare: true})
	if err != nil {
		t.Fatal(err)
	}
	out := bytes.NewBufferString(s)
	for _, line := range strings.Split(out.String(), "\n") {
		if len([]rune(line)) > 100 {
			t.Errorf("compare line too wide: %q", line)
		}
	}
	if !strings.Contains(out.String(), "YES") {
		t.Errorf("compare text marks no difference beyond its CI:\n%s", out.String())
	}
	for _, f := range []string{"md", "json", "html"} {
		if s, err := renderText(Config{Paths: []string{a, slow}, Compare: true, Format: f}); err != nil || len(s) == 0 {
			t.Fatalf("compare %s: %v", f, err)
		}
	}
}
