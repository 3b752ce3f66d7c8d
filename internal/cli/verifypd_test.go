package cli

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/gateway/gatewaytest"
	"github.com/tokentrace/tokentrace/internal/serve"
	"github.com/tokentrace/tokentrace/internal/verify"
)

// role runs serve in role (serve.RolePrefill, RoleDecode, RoleBoth)
// pulling the KV cache over link.
func role(r, link string) func(*serve.Options) {
	return func(o *serve.Options) { o.Role, o.KVLink = r, link }
}

// The P/D loop end to end: two aggregated serves behind the gateway, then
// the same load on a 1P1D pair behind the gateway as P/D router; verify
// finds the split in the gateway's evidence (replicas and
// prefill_replicas) and the link in the second run's transfers, the twin
// calibrated on the first run re-simulates it disaggregated, and every
// latency row gets a verdict. --applied disaggregate=1P:1D says the same.
func TestVerifyDisaggregateBehindTheGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("runs serve and the gateway on the wall clock and calibrates")
	}
	agg, _ := gatewaytest.Start(t, fmt.Sprintf("pools:\n  - name: main\n    replicas:\n      - {url: %q, kind: tokentrace}\n      - {url: %q, kind: tokentrace}\nroutes:\n  - {model: \"*\", pool: main}\n",
		serveWith(t, role(serve.RoleBoth, "")), serveWith(t, role(serve.RoleBoth, ""))))
	pd, _ := gatewaytest.Start(t, fmt.Sprintf("pools:\n  - name: prefill\n    replicas:\n      - {url: %q, kind: tokentrace}\n  - name: decode\n    replicas:\n      - {url: %q, kind: tokentrace}\nroutes:\n  - {model: \"*\", pool: decode, prefill_pool: prefill}\n",
		serveWith(t, role(serve.RolePrefill, "tcp")), serveWith(t, role(serve.RoleDecode, "tcp"))))
	load := []string{"--rate", "8", "--requests", "48", "--input-tokens", "1024", "--output-tokens", "32", "--ignore-eos", "--seed", "3"}
	before := benched(t, "before", append([]string{"--url", agg + "/v1"}, load...)...)
	after := benched(t, "after", append([]string{"--url", pd + "/v1"}, load...)...)
	profile := filepath.Join(t.TempDir(), "before.yaml")
	if out, err := run(t, "calibrate", before, "--model", "Llama-3.1-8B", "--gpu", "H100-SXM", "--bootstrap", "2", "-o", profile); err != nil {
		t.Fatalf("calibrate: %v\n%s", err, out)
	}
	r := verifyJSON(t, before, after, "--profile", profile, "--draws", "3")
	oneChange(t, r, "pd_split", "2", "1P:1D", "server", "disaggregate")
	oneChange(t, r, "kv_link", "", "tcp", "records", "kv-link")
	if r.Lever != "disaggregate+kv-link" {
		t.Errorf("lever %q, want disaggregate+kv-link (changes %+v)", r.Lever, r.Changes)
	}
	if !strings.Contains(r.Deployment, "disaggregated 1P:1D") || !strings.Contains(r.Deployment, "over tcp") {
		t.Errorf("deployment %q: want the twin disaggregated 1P:1D over tcp", r.Deployment)
	}
	for _, x := range []string{"p50", "p95"} {
		for _, metric := range []string{"ttft", "tpot", "e2e"} {
			if v := rowOf(t, r, metric, x).Verdict; v == verify.NoData {
				t.Errorf("%s %s: no verdict", metric, x)
			}
		}
	}
	m := rowOf(t, r, "ttft", "p50")
	t.Logf("disaggregate: %s; %s", r.Summary(), rowErrors(r))
	t.Logf("TTFT P50 before %.1f ms, twin before %.1f, predicted %.1f [%.1f, %.1f], measured %.1f (%s)", m.Before, m.TwinBefore, m.Predicted, m.Low, m.High, m.Measured, m.Verdict)
	// The same change named by hand: --applied agrees with the evidence.
	ra := verifyJSON(t, before, after, "--profile", profile, "--draws", "2", "--applied", "disaggregate=1P:1D", "--applied", "kv-link=tcp")
	if ra.Lever != r.Lever || len(ra.Notes) == 0 {
		t.Errorf("--applied: lever %q, want %q", ra.Lever, r.Lever)
	}
}
