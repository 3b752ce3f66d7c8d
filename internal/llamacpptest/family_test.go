package llamacpptest_test

import (
	"testing"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// fitFile is the profile calibrate fitted on this machine's llama-server
// (TestCalibrateThenSimulateAgainstLlamaServer's 1- and 4-worker runs on
// the cpu-zen5-1t device, its 8-worker run held out; the file's comments
// say when and at what load): what the llamacpp engine family ships.
const fitFile = "testdata/llamacpp-fit.yaml"

// The constants the llamacpp family ships for the CPU device are the fit
// of llama-server here, value for value: `--engine llamacpp --gpu
// cpu-zen5-1t` predicts with what the real server was measured to do.
func TestFamilyConstantsAreTheFit(t *testing.T) {
	prof, err := perfmodel.LoadProfile(fitFile)
	if err != nil {
		t.Fatal(err)
	}
	fam, err := engine.LookupFamily(prof.Engine)
	if err != nil || fam.Name != "llamacpp" {
		t.Fatalf("the fit's engine %q is not the llamacpp family (%v)", prof.Engine, err)
	}
	got, ok := fam.ConstantsFor(prof.GPU, perfmodel.DType(prof.DType))
	if !ok {
		t.Fatalf("the llamacpp family ships no constants for %s", prof.GPU)
	}
	if want := prof.Efficiency(); got != want {
		t.Errorf("the llamacpp family ships %+v for %s, the fit is %+v", got, prof.GPU, want)
	}
}
