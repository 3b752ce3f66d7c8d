package llamacpptest_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/tokentrace/tokentrace/internal/enginetest"
	"github.com/tokentrace/tokentrace/internal/llamacpptest"
	"github.com/tokentrace/tokentrace/internal/racedetect"
	"github.com/tokentrace/tokentrace/internal/verify"
)

// TestVerifyMoreSlotsAgainstLlamaServer is the loop's last step against
// llama-server: 8 workers on 2 slots queue; a profile is calibrated on that
// run; the same load runs on 4 slots; verify finds the change of slots in
// the runs' own evidence — llama-server's /props (total_slots), which bench
// records as max_num_seqs — with no --applied, and sets the prediction
// beside the measurement. It asserts what verify concludes (the change from
// the server, the lever, every row judged) and logs each row's error,
// interval and verdict. It runs only where LLAMA_SERVER names a binary
// (llamacpptest.Find skips it otherwise); the stand-in for /props is
// internal/cli's TestVerifyFindsLlamaCppSlotsInProps.
func TestVerifyMoreSlotsAgainstLlamaServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs llama-server twice (about two minutes)")
	}
	if racedetect.Enabled {
		t.Skip("fits the twin in process: nothing for -race to check")
	}
	llamacpptest.Find(t)
	dir := t.TempDir()
	gpus, err := filepath.Abs(cpuDevice)
	if err != nil {
		t.Fatal(err)
	}
	load := []string{"--concurrency", "8", "--requests", "48"}
	runOn := func(slots int, name string) (string, *llamacpptest.Server) {
		s := llamacpptest.Start(t, llamacpptest.Options{Slots: slots, Args: []string{"--no-cache-prompt"}})
		d := filepath.Join(dir, name)
		checkRun(t, bench(t, s.URL, d, load...))
		s.Stop()
		return d, s
	}
	before, s := runOn(2, "before")
	model := filepath.Join(dir, "config.json")
	if err := os.WriteFile(model, enginetest.ConfigJSON(s.Shape, s.Context), 0o600); err != nil {
		t.Fatal(err)
	}
	profile := filepath.Join(dir, "before.yaml")
	out, err := tokentrace(t, "calibrate", before, "-o", profile, "--model", model, "--gpu", "cpu-zen5-1t", "--gpu-file", gpus,
		"--engine", "llamacpp", "--dtype", "fp16", "--max-num-seqs", "2", "--enable-chunked-prefill=false")
	if err != nil {
		t.Fatalf("calibrate: %v\n%s", err, out)
	}
	after, _ := runOn(4, "after")
	out, err = tokentrace(t, "verify", before, after, "--profile", profile, "--gpu-file", gpus, "--format", "json")
	if err != nil {
		t.Fatalf("verify: %v\n%s", err, out)
	}
	var r verify.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("verify JSON: %v\n%s", err, out)
	}
	found := false
	for _, c := range r.Changes {
		found = found || c.Setting == "max_num_seqs" && c.Before == "2" && c.After == "4" && c.Source == "server"
	}
	if !found || r.Lever != "max-num-seqs" || r.Judged < 13 {
		t.Fatalf("verify: lever %q, %d rows judged, changes %+v: want max_num_seqs 2 → 4 from the server's /props", r.Lever, r.Judged, r.Changes)
	}
	for _, x := range r.Rows {
		if x.Verdict != verify.NoData {
			t.Logf("%s %s: before %.2f, predicted %.2f [%.2f … %.2f], measured %.2f %s (%+.1f %%): %s",
				x.Metric, x.Stat, x.Before, x.Predicted, x.Low, x.High, x.Measured, x.Unit, 100*x.Error, x.Verdict)
		}
	}
	t.Logf("%s; notes %q", r.Summary(), r.Notes)
}
