package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/gateway/gatewaytest"
	"github.com/tokentrace/tokentrace/internal/openaitest"
)

// TestUpstreamMetrics: the gateway's /upstream/metrics answers its
// replicas' own /metrics, each series labelled by replica.
func TestUpstreamMetrics(t *testing.T) {
	e := openaitest.StartSlots(t, &openaitest.SlotEngine{Dialect: openaitest.DialectVLLM, Slots: 2,
		Prefill: time.Millisecond, Metrics: true})
	gw, _ := gatewaytest.Start(t, gatewaytest.OnePool(e.URL(), "vllm"))
	resp, err := http.Get(gw + "/upstream/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := `vllm:num_requests_waiting{replica="` + e.URL() + `"} 0`
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), want) {
		t.Errorf("status %d, want a line %s in:\n%s", resp.StatusCode, want, b)
	}
}
