package perfmodel

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func testProfile() *Profile {
	eff := DefaultEfficiency(GPU{Family: "hopper"})
	eff.Compute = 0.42
	c := ProfileFromEfficiency(eff)
	c.Compute = Constant{Value: 0.42, Low: 0.4, High: 0.44, Fitted: true}
	return &Profile{Schema: ProfileSchema, Model: "Llama-3.1-8B", GPU: "H100-SXM", TP: 1, DType: "bf16", KVDType: "bf16",
		Constants: c, Range: FitRange{BatchMin: 1, BatchMax: 32, InputMin: 100, InputMax: 3000, OutputMin: 16, OutputMax: 128}}
}

func TestProfileRoundTripAndChecks(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.yaml")
	p := testProfile()
	if err := p.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	got, err := LoadProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(p, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if e := got.Efficiency(); e.Compute != 0.42 || e.StepOverhead != DefaultEfficiency(GPU{Family: "hopper"}).StepOverhead {
		t.Errorf("efficiency %+v", e)
	}
	m70, _ := LookupModel("Llama-3.1-70B")
	g, _ := LookupGPU("H100-SXM")
	if err := got.Matches(m70, g, 1, BF16, BF16); err == nil || !strings.Contains(err.Error(), "model Llama-3.1-8B, not Llama-3.1-70B") {
		t.Errorf("a profile for another model: %v", err)
	}
	if n := got.OutOfRange(64, 500, 64); len(n) != 1 || !strings.Contains(n[0], "batch 64") {
		t.Errorf("out of range: %v", n)
	}
	if n := got.OutOfRange(8, 500, 64); n != nil {
		t.Errorf("inside the range: %v", n)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("schema: 1\nmodel: x\nunknown_key: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadProfile(bad); err == nil {
		t.Error("an unknown key was accepted")
	}
	// A failed write leaves nothing behind.
	if err := (&Profile{}).WriteFile(filepath.Join(dir, "none.yaml")); err == nil {
		t.Error("an invalid profile was written")
	}
	if _, err := os.Stat(filepath.Join(dir, "none.yaml")); !os.IsNotExist(err) {
		t.Error("an invalid profile left a file")
	}
}

func TestPlanWithProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := testProfile().WriteFile(path); err != nil {
		t.Fatal(err)
	}
	res, err := Plan(Request{Model: "Llama-3.1-8B", GPU: "H100-SXM", Input: 500, Output: 64, Batches: []int{8, 64}, Profile: path})
	if err != nil {
		t.Fatal(err)
	}
	if res.Est.Config().Eff.Compute != 0.42 || len(res.OutOfRange) != 1 {
		t.Errorf("compute %g, out of range %v", res.Est.Config().Eff.Compute, res.OutOfRange)
	}
	if _, err := Plan(Request{Model: "Llama-3.1-70B", GPU: "H100-SXM", TP: 4, Input: 500, Output: 64, Batches: []int{8}, Profile: path}); err == nil {
		t.Error("a profile for another model was accepted")
	}
}
