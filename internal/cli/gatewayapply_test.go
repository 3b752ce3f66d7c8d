package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGatewayApplyWritesAndRefuses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	base := "pools: [{name: p, replicas: [{url: \"http://127.0.0.1:9\"}]}]\nroutes: [{model: \"*\", pool: p}]\n"
	if err := os.WriteFile(path, []byte(base), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "gateway", "apply", "--config", path, "concurrency=4", "max-queue=8")
	if err != nil || !strings.Contains(out, "queue.concurrency unset → 4") {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), "concurrency: 4") || !strings.Contains(string(b), "max_size: 8") {
		t.Errorf("file:\n%s", b)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want the file's own 0600", st.Mode().Perm())
	}
	for _, args := range [][]string{
		{"gateway", "apply", "concurrency=4"},
		{"gateway", "apply", "--config", path, "warp=1"},
		{"gateway", "apply", "--config", filepath.Join(t.TempDir(), "none.yaml"), "concurrency=4"},
	} {
		if _, err := run(t, args...); exitCode(err) != ExitUsage {
			t.Errorf("%v: %v (exit %d), want exit 2", args, err, exitCode(err))
		}
	}
	if b2, _ := os.ReadFile(path); string(b2) != string(b) {
		t.Errorf("a refused lever changed the file")
	}
}

// calibrate --ledger leaves out the ledger's runs the fit cannot take
// (simulated, another scheduler) and says why; with none left it refuses.
func TestCalibrateLedgerRunsFiltered(t *testing.T) {
	load := []string{"--concurrency", "2", "--requests", "8", "--input-tokens", "64", "--output-tokens", "8"}
	a := benched(t, "a", append(load, "--sim-max-num-seqs", "2")...)
	b := benched(t, "b", append(load, "--sim-max-num-seqs", "4")...)
	ledger := filepath.Join(t.TempDir(), "twin.jsonl")
	if out, err := run(t, "verify", a, b, "--ledger", ledger); err != nil {
		t.Fatalf("verify: %v\n%s", err, out)
	}
	out, err := run(t, "calibrate", "--ledger", ledger, "--model", "Llama-3.1-8B", "--gpu", "H100-SXM", "-o", filepath.Join(t.TempDir(), "p.yaml"))
	if exitCode(err) != ExitUsage || !strings.Contains(out, "left out "+a) || !strings.Contains(err.Error(), "holds no run the fit can take") {
		t.Errorf("a ledger of runs the fit cannot take: %v (exit %d)\n%s", err, exitCode(err), out)
	}
	if _, err := run(t, "calibrate"); err == nil {
		t.Error("calibrate with neither folders nor --ledger: no error")
	}
}
