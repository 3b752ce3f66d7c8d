package report

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// Percentiles, histograms and bootstrap intervals are internal/stats's
// (tested there); report keeps its least-squares fit.

func TestLinearFitByHand(t *testing.T) {
	f, ok := linearFit([]float64{1, 2, 3}, []float64{2, 4, 6})
	if !ok || f.Slope != 2 || f.Intercept != 0 || f.R2 != 1 {
		t.Errorf("exact line: %+v %v", f, ok)
	}
	// x̄ = 1.5, ȳ = 2.75, Sxy = 5.5, Sxx = 5, Syy = 8.75:
	// slope 1.1, intercept 1.1, R² = 5.5² / (5 × 8.75) = 0.691428…
	f, _ = linearFit([]float64{0, 1, 2, 3}, []float64{1, 3, 2, 5})
	want := fit{Slope: 1.1, Intercept: 1.1, R2: 30.25 / 43.75, N: 4}
	if diff := cmp.Diff(want, f, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
		t.Errorf("fit (-want +got):\n%s", diff)
	}
	if _, ok := linearFit([]float64{1, 1, 1}, []float64{1, 2, 3}); ok {
		t.Error("no spread in x must not fit")
	}
}
