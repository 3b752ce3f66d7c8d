package report

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tokentrace/tokentrace/internal/latency"
)

// everyMetricRun is a run with an SLO on every metric latency knows and
// requests that reason before answering (so ttft_answer is reported) and
// stall once in a while (so icl has a sample).
func everyMetricRun(t *testing.T) *Report {
	t.Helper()
	pts := baseline(200, 10, 7)
	for i := range pts {
		pts[i].reasoning = 3
		if i%10 == 0 {
			pts[i].stallAt, pts[i].stall = 5, 200
		}
	}
	names := make([]string, len(latency.Metrics))
	for i, m := range latency.Metrics {
		names[i] = string(m) + ":p99<=2s"
	}
	return collect(Options{SLOs: mustSLOs(t, strings.Join(names, ","))}, pts)
}

// TestEveryMetricJSON pins the JSON of a report that names every metric
// (in its distributions, its SLO verdicts and its decomposition) to a
// golden file, and checks that decoding and encoding it again gives the
// same bytes: typing the metric names changed nothing on the wire.
func TestEveryMetricJSON(t *testing.T) {
	rep := everyMetricRun(t)
	seen := map[latency.Metric]bool{}
	for _, v := range rep.SLOs {
		seen[v.Metric] = true
	}
	for _, m := range latency.Metrics {
		if !seen[m] {
			t.Errorf("no verdict for %s", m)
		}
	}
	for _, m := range headMetrics {
		if rep.dist(m) == nil {
			t.Errorf("no distribution of %s", m)
		}
	}
	var b bytes.Buffer
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "golden", "every-metric.json")
	if *update {
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if diff := cmp.Diff(string(want), b.String()); diff != "" {
		t.Errorf("%s differs from the golden file (-want +got; -update to accept):\n%s", path, diff)
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if err := back.WriteJSON(&again); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(b.String(), again.String()); diff != "" {
		t.Errorf("the report's JSON does not survive a round trip (-first +second):\n%s", diff)
	}
}
