package cli

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/gateway/gatewaytest"
	"github.com/tokentrace/tokentrace/internal/verify"
)

// metricsHold polls url's /metrics until it holds want (10 s at most).
func metricsHold(t *testing.T, url, want string) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(url + "/metrics")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if strings.Contains(string(b), want) {
			return
		}
	}
	t.Fatalf("%s/metrics never held %s", url, want)
}

// The loop with a remedy tokentrace applies itself: serve (4 slots)
// behind the gateway under twice its capacity, an admission limit
// applied by `gateway apply` and the gateway's reload (no hand edit),
// the same load again, then verify: the change is found in the gateway's
// configuration evidence (run.json), the twin calibrated on the first run
// re-simulates it folded into the engine, and TTFT's tail falls in both
// the prediction and the measurement (figures: docs/performance.md).
func TestVerifyGatewayAdmissionByReload(t *testing.T) {
	if testing.Short() {
		t.Skip("runs serve and the gateway on the wall clock and calibrates")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "gateway.yaml")
	up := serveWith(t, slots(4))
	conf := fmt.Sprintf("# serve behind the gateway\npools:\n  - name: main\n    replicas:\n      - {url: %q, kind: tokentrace}\nroutes:\n  - {model: \"*\", pool: main}\n", up)
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	gw, _ := gatewaytest.StartFile(t, path, 20*time.Millisecond) // reloaded every 20 ms
	// 4 slots × 64 output tokens: about 8 requests a second on the
	// simulated H100; 16 a second is twice that.
	load := []string{"--url", gw + "/v1", "--rate", "16", "--requests", "80", "--input-tokens", "256", "--output-tokens", "64", "--ignore-eos", "--seed", "3"}
	before := benched(t, "before", load...)
	if out, err := run(t, "gateway", "apply", "--config", path, "concurrency=4", "max-queue=4"); err != nil {
		t.Fatalf("gateway apply: %v\n%s", err, out)
	}
	metricsHold(t, gw, `gateway_concurrency="4"`)
	after := benched(t, "after", load...)
	profile := filepath.Join(dir, "before.yaml")
	if out, err := run(t, "calibrate", before, "--model", "Llama-3.1-8B", "--gpu", "H100-SXM", "--max-num-seqs", "4", "--bootstrap", "2", "-o", profile); err != nil {
		t.Fatalf("calibrate: %v\n%s", err, out)
	}
	ledger := filepath.Join(dir, "twin.jsonl")
	r := verifyJSON(t, before, after, "--profile", profile, "--ledger", ledger)
	oneChange(t, r, "gateway_concurrency", "0", "4", "server", "gateway-admission")
	oneChange(t, r, "gateway_max_queue", "1024", "4", "server", "gateway-admission")
	if r.Lever != "gateway-admission" {
		t.Errorf("lever %q, want gateway-admission (changes %+v)", r.Lever, r.Changes)
	}
	if !strings.Contains(r.Deployment, "max_num_seqs 4") || !strings.Contains(r.Deployment, "max_waiting 4") {
		t.Errorf("deployment %q: want the gateway's limit folded into the engine (4 running, 4 waiting)", r.Deployment)
	}
	m := rowOf(t, r, "ttft", "p95")
	if !(m.Predicted < 0.7*m.Before) || !(m.Measured < 0.7*m.Before) {
		t.Errorf("TTFT P95 before %v, predicted %v, measured %v: both should fall under the admission limit", m.Before, m.Predicted, m.Measured)
	}
	for _, x := range []string{"p50", "p95"} {
		for _, metric := range []string{"ttft", "e2e"} {
			if v := rowOf(t, r, metric, x).Verdict; v == verify.NoData {
				t.Errorf("%s %s: no verdict", metric, x)
			}
		}
	}
	t.Logf("gateway admission: %s; %s", r.Summary(), rowErrors(r))
	// The ledger as more data: calibrate fits BEFORE and AFTER (the same
	// server behind the gateway) and re-runs the verify with the new
	// profile, saying how much the error fell.
	out, err := run(t, "calibrate", "--ledger", ledger, "--model", "Llama-3.1-8B", "--gpu", "H100-SXM", "--max-num-seqs", "4", "--bootstrap", "2",
		"-o", filepath.Join(dir, "both.yaml"))
	if err != nil || !strings.Contains(out, "THE LEDGER'S VERIFIES") || !strings.Contains(out, "all 1: ") {
		t.Errorf("calibrate --ledger: %v\n%s", err, out)
	}
	if _, table, ok := strings.Cut(out, "THE LEDGER'S VERIFIES"); ok {
		t.Logf("calibrate --ledger: the ledger's verifies%s", table)
	}
	t.Logf("TTFT P95 before %.0f ms, predicted %.0f [%.0f, %.0f], measured %.0f; throughput %.2f → %.2f req/s; notes: %s",
		m.Before, m.Predicted, m.Low, m.High, m.Measured, rowOf(t, r, "throughput", "rate").Before, rowOf(t, r, "throughput", "rate").Measured, strings.Join(r.Notes, " | "))
}
