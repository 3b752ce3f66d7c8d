package cli

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/openaitest"
	"github.com/tokentrace/tokentrace/internal/verify"
)

// llama-server's slots are found in its /props, not through --applied: a
// stand-in speaking llama.cpp's dialect (its timings, llamacpp:* gauges
// and /props' total_slots) with 2 slots, then 4, under the same closed
// loop of 8; bench records total_slots as the server's max_num_seqs, and
// verify, with a profile calibrated on the first run, names the change
// max_num_seqs 2 → 4 from the server's evidence and judges every latency
// row (the stand-in sleeps a fixed time a token, whatever the batch: no
// engine's physics, so its errors are logged, not asserted). (The real
// llama-server's test, run where LLAMA_SERVER names a
// binary: internal/llamacpptest's TestVerifyMoreSlotsAgainstLlamaServer.)
func TestVerifyFindsLlamaCppSlotsInProps(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two stand-ins on the wall clock and calibrates")
	}
	engine := func(slots int) string {
		e := openaitest.StartSlots(t, &openaitest.SlotEngine{Dialect: openaitest.DialectLlamaCpp, Slots: slots,
			Prefill: 20 * time.Millisecond, PerToken: 3 * time.Millisecond, Tokens: 16, Evidence: true, Metrics: true})
		return e.URL() + "/v1"
	}
	load := []string{"--model", "stand-in", "--concurrency", "8", "--requests", "32", "--input-tokens", "8", "--output-tokens", "16",
		"--no-calibration", "--seed", "3"}
	before := benched(t, "before", append(load, "--url", engine(2))...)
	after := benched(t, "after", append(load, "--url", engine(4))...)
	profile := filepath.Join(t.TempDir(), "before.yaml")
	if out, err := run(t, "calibrate", before, "--model", "Llama-3.1-8B", "--gpu", "H100-SXM", "--engine", "llamacpp",
		"--max-num-seqs", "2", "--bootstrap", "2", "-o", profile); err != nil {
		t.Fatalf("calibrate: %v\n%s", err, out)
	}
	r := verifyJSON(t, before, after, "--profile", profile, "--draws", "3")
	oneChange(t, r, "max_num_seqs", "2", "4", "server", "max-num-seqs")
	if r.Lever != "max-num-seqs" {
		t.Errorf("lever %q, want max-num-seqs (changes %+v)", r.Lever, r.Changes)
	}
	for _, metric := range []string{"ttft", "tpot", "e2e"} {
		if v := rowOf(t, r, metric, "p50").Verdict; v == verify.NoData {
			t.Errorf("%s p50: no verdict", metric)
		}
	}
	t.Logf("llama.cpp stand-in: %s; %s", r.Summary(), rowErrors(r))
}
