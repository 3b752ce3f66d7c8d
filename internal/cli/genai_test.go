package cli

import (
	"path/filepath"
	"testing"

	"github.com/tokentrace/tokentrace/internal/tracing"
	"github.com/tokentrace/tokentrace/internal/tracing/otlptest"
)

// bench --otlp-endpoint exports the OpenTelemetry GenAI client metrics of
// its requests, with the conventions' names and units, to an in-test OTLP
// receiver.
func TestBenchExportsGenAIMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("runs bench against the embedded engine")
	}
	rcv := otlptest.NewReceiver(t)
	dir := filepath.Join(t.TempDir(), "run")
	if out, err := run(t, "bench", "--requests", "6", "--rate", "20", "--output-tokens", "8", "--input-tokens", "32",
		"--otlp-endpoint", rcv.URL(), "--output-dir", dir); err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	points, bad := rcv.Points()
	if len(bad) > 0 {
		t.Fatalf("receiver could not decode: %v", bad)
	}
	units := map[string]string{}
	counts := map[string]uint64{}
	for _, p := range points {
		units[p.Metric] = p.Unit
		if p.Service == "tokentrace-bench" && p.Attrs["gen_ai.token.type"] != "input" {
			counts[p.Metric] = max(counts[p.Metric], p.Count)
		}
	}
	for name, unit := range map[string]string{
		tracing.MetricClientDuration: "s", tracing.MetricClientTTFC: "s", tracing.MetricTokenUsage: "{token}",
	} {
		if units[name] != unit {
			t.Errorf("metric %s: unit %q, want %q (received %v)", name, units[name], unit, units)
		}
	}
	if counts[tracing.MetricClientDuration] < 6 || counts[tracing.MetricClientTTFC] < 6 {
		t.Errorf("client metrics counted %v, want the 6 measured requests", counts)
	}
}
