package calibrate

import (
	"testing"
	"time"
)

// exactIntake finds where a monotone TTFT reaches the measured value, to
// intakeStep, and stops at the search's ends.
func TestExactIntake(t *testing.T) {
	// TTFT = 20 ms + the intake: 64 ms measured needs 44 ms.
	linear := func(d time.Duration) (float64, error) { return 20 + ms(d), nil }
	for _, tc := range []struct {
		name     string
		measured float64
		want     time.Duration
	}{
		{"inside", 64, 44 * time.Millisecond},
		{"slow without one", 15, 0},
		{"beyond the bound", 20 + ms(maxIntake) + 1, maxIntake},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := exactIntake(linear, tc.measured)
			if err != nil {
				t.Fatal(err)
			}
			if d := got - tc.want; d > intakeStep || d < -intakeStep {
				t.Errorf("exactIntake = %v, want %v ± %v", got, tc.want, intakeStep)
			}
		})
	}
}

// FitIntake recovers the intake a row's TTFT was made with.
func TestFitIntakeRecoversTheIntake(t *testing.T) {
	row := PublicRow{ID: "synthetic", Engine: "vLLM", Model: "Llama-3.1-8B", GPU: "H100-SXM", TP: 1,
		DType: "bf16", KVDType: "bf16", Input: 200, Output: 50, Concurrency: 4, Requests: 40}
	eff, err := FamilyEff(row)
	if err != nil {
		t.Fatal(err)
	}
	const truth = 30 * time.Millisecond
	pr, err := predictWith(row, eff, truth)
	if err != nil {
		t.Fatal(err)
	}
	row.TTFT = pr.TTFT
	got, loss, err := FitIntake([]PublicRow{row}, FamilyEff)
	if err != nil {
		t.Fatal(err)
	}
	if d := got - truth; d > 2*intakeStep || d < -2*intakeStep || loss > 0.01 {
		t.Errorf("FitIntake = %v (median |error| %.3f), want %v", got, loss, truth)
	}
	if _, _, err := FitIntake([]PublicRow{{ID: "no-ttft"}}, FamilyEff); err == nil {
		t.Error("FitIntake without a TTFT: no error")
	}
}

// intakeOf gives NIM's rows NIM's front end, a row naming its engine's
// release that release's (families.yaml), and a row naming none nothing.
func TestIntakeOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		row  PublicRow
		want time.Duration
	}{
		{"NIM", PublicRow{Engine: "NIM (TensorRT-LLM)", EngineVersion: "NIM 1.8.0"}, nimIntake},
		{"vLLM 0.11", PublicRow{Engine: "vLLM", EngineVersion: "0.11.0"}, 37600 * time.Microsecond},
		{"TensorRT-LLM 1.2", PublicRow{Engine: "TensorRT-LLM", EngineVersion: "1.2.0rc1"}, 24000 * time.Microsecond},
		{"TensorRT-LLM 0.x", PublicRow{Engine: "TensorRT-LLM", EngineVersion: "0.18"}, 0},
		{"no release", PublicRow{Engine: "vLLM"}, 0},
		{"no family", PublicRow{Engine: "some-server", EngineVersion: "1.0"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := intakeOf(tc.row); got != tc.want {
				t.Errorf("intakeOf = %v, want %v", got, tc.want)
			}
		})
	}
}
