package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/scrape"
)

// exposition is a gateway's stage histograms as its /metrics writes them:
// every stage with two label sets (sum, count each), the queue's under
// its Prometheus name.
func exposition(sums [2]float64, counts [2]int) string {
	var b strings.Builder
	for _, s := range latency.GatewayStages {
		name := stageMetric(s)
		fmt.Fprintf(&b, "# TYPE %s histogram\n", name)
		for i, model := range []string{"a", "b"} {
			fmt.Fprintf(&b, "%s_bucket{pool=\"p\",model=%q,le=\"+Inf\"} %d\n", name, model, counts[i])
			fmt.Fprintf(&b, "%s_sum{pool=\"p\",model=%q} %g\n", name, model, sums[i])
			fmt.Fprintf(&b, "%s_count{pool=\"p\",model=%q} %d\n", name, model, counts[i])
		}
	}
	return b.String()
}

// Each stage's mean per request between two readings, hand-computed:
// before, 0.010 s over 10 requests (two label sets: 0.004/4, 0.006/6);
// after, 0.040 s over 30 (0.015/12, 0.025/18): (0.040 − 0.010) s / 20 =
// 1,500 µs, every stage. An exposition without them (nginx, the Go floor)
// has none; no request between the readings, no means.
func TestStageMeans(t *testing.T) {
	read := func(s string) stageTotals {
		t.Helper()
		f, err := scrape.Parse(bytes.NewBufferString(s))
		if err != nil {
			t.Fatal(err)
		}
		return readStages(f)
	}
	before := read(exposition([2]float64{0.004, 0.006}, [2]int{4, 6}))
	after := read(exposition([2]float64{0.015, 0.025}, [2]int{12, 18}))
	got, ok := stageMeans(before, after)
	want := make([]float64, len(latency.GatewayStages))
	for i := range want {
		want[i] = 1500
	}
	if !ok {
		t.Fatal("no means")
	}
	if d := cmp.Diff(want, got, cmp.Comparer(func(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 })); d != "" {
		t.Errorf("means, µs (-want +got):\n%s", d)
	}
	if s := read("# TYPE go_memstats_mallocs_total counter\ngo_memstats_mallocs_total 5\n"); s != nil {
		t.Errorf("stages of a process without them: %v, want nil", s)
	}
	if _, ok := stageMeans(before, before); ok {
		t.Error("means with no request between the readings")
	}
}
