package gateway

import (
	"flag"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestGoldenMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	tl := handTimeline()
	m.observe(&observation{pool: "p", model: "m", status: 200, stream: true, stages: tl.stages(), tl: tl,
		ttft: 20150 * time.Microsecond, outTokens: 5, chunkNS: []int64{20150e3, 40150e3, 70150e3}})
	m.observe(&observation{pool: "p", model: "m", status: 429, stages: stageDurations{In: 40 * time.Microsecond}, tl: &timeline{}})
	// Hand-computed: TPOT = (100.2 − 20.15) ms / (5 − 1) = 20.0125 ms.
	if got := testutil.ToFloat64(m.Requests.WithLabelValues("p", "m", "429")); got != 1 {
		t.Errorf("429 count %v", got)
	}
	names := []string{"gen_ai_server_time_to_first_token_seconds", "gen_ai_server_time_per_output_token_seconds",
		"gen_ai_server_request_duration_seconds", "tokentrace_gateway_requests_total", "tokentrace_gateway_stage_gateway_in_seconds",
		"tokentrace_gateway_stage_network_seconds", "tokentrace_gateway_chunk_gap_seconds"}
	golden := filepath.Join("testdata", "metrics.golden")
	if *update {
		rec := httptest.NewRecorder()
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		var keep []string
		for _, block := range strings.Split(rec.Body.String(), "# HELP ") {
			for _, n := range names {
				if strings.HasPrefix(block, n+" ") {
					keep = append(keep, "# HELP "+block)
				}
			}
		}
		if err := os.WriteFile(golden, []byte(strings.Join(keep, "")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(golden)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := testutil.GatherAndCompare(reg, f, names...); err != nil {
		t.Error(err)
	}
}
