package ollamatest_test

import (
	"path/filepath"
	"testing"

	"github.com/tokentrace/tokentrace/internal/gateway/gatewaytest"
	"github.com/tokentrace/tokentrace/internal/ollamatest"
	"github.com/tokentrace/tokentrace/internal/report"
)

// TestEveryAPIAgainstOllama: the same load over each API Ollama serves —
// its OpenAI chat, the Responses and Messages APIs, and its native
// /api/chat — gives records of one meaning (every answer run to its
// length, no failure) and TTFT and TPOT alike within a loaded machine's
// spread. Ollama's native API alone carries its durations.
func TestEveryAPIAgainstOllama(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ollama (about a minute)")
	}
	s := ollamatest.Start(t, ollamatest.Options{Parallel: 2})
	p50 := func(rep *report.Report, metric string) float64 {
		for _, d := range rep.Metrics {
			if d.Metric == metric {
				return d.P50
			}
		}
		t.Fatalf("no %s in the report", metric)
		return 0
	}
	// A first run warms the model and the connections, so the order of the
	// runs below does not favour one API.
	bench(t, s.URL, s.Model, filepath.Join(t.TempDir(), "warm"), "--concurrency", "2", "--requests", "8")
	run := func(endpoint string) (ttft, tpot float64) {
		dir := filepath.Join(t.TempDir(), endpoint)
		rep := bench(t, s.URL, s.Model, dir, "--endpoint", endpoint, "--concurrency", "2", "--requests", "16")
		checkRun(t, rep, dir, 32)
		ttft, tpot = p50(rep, "ttft"), p50(rep, "tpot")
		t.Logf("%-9s TTFT P50 %7.1f ms  TPOT P50 %6.2f ms", endpoint, ttft, tpot)
		return ttft, tpot
	}
	// The same engine behind each API: a factor of two bounds what a
	// loaded machine moves between runs; a wrong first token (a reasoning
	// or framing event taken as text) or a missed end is off by far more.
	apart := func(ttft, tpot, chatTTFT, chatTPOT float64) bool {
		return ttft > 2*chatTTFT || ttft < chatTTFT/2 || tpot > 2*chatTPOT || tpot < chatTPOT/2
	}
	chatTTFT, chatTPOT := run("chat")
	for _, endpoint := range []string{"responses", "messages", "ollama"} {
		ttft, tpot := run(endpoint)
		if !apart(ttft, tpot, chatTTFT, chatTPOT) {
			continue
		}
		// Minutes apart on a busy CPU: chat again, then the API at once.
		chatTTFT, chatTPOT = run("chat")
		if ttft, tpot = run(endpoint); apart(ttft, tpot, chatTTFT, chatTPOT) {
			t.Errorf("%s: TTFT P50 %.1f ms, TPOT P50 %.2f ms against chat's %.1f and %.2f run just before", endpoint, ttft, tpot, chatTTFT, chatTPOT)
		}
	}
}

// TestEveryAPIThroughTheGateway: with the gateway in front of Ollama, each
// API's requests pass and are measured (before, the Responses and
// Messages calls got 404 unknown path).
func TestEveryAPIThroughTheGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Ollama")
	}
	s := ollamatest.Start(t, ollamatest.Options{Parallel: 2})
	gw, _ := gatewaytest.Start(t, gatewaytest.OnePool(s.URL, ""))
	for _, endpoint := range []string{"responses", "messages", "ollama"} {
		dir := filepath.Join(t.TempDir(), endpoint)
		rep := bench(t, gw, s.Model, dir, "--endpoint", endpoint, "--concurrency", "2", "--requests", "8")
		checkRun(t, rep, dir, 32)
	}
}
