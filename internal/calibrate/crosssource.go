package calibrate

import (
	"cmp"
	"math"
	"slices"
)

// SourcedError is one prediction's relative error and the source (one
// publisher's measurement set) of the row it predicted.
type SourcedError struct {
	Source string
	Err    float64
}

// SourceQuantile is the q-quantile of |Err| with every source weighing the
// same: a row of a source of n rows weighs 1/(n·S) among S sources, and
// the quantile is the smallest |Err| at which the weight of the values at
// or below it reaches q (a nearest-rank quantile over sources; with one
// row per source it is the nearest-rank quantile). NaN errors are left
// out; no errors give 0 (docs/metrics.md, "The twin's 80 % interval").
func SourceQuantile(errs []SourcedError, q float64) float64 {
	n := map[string]int{}
	var xs []SourcedError
	for _, e := range errs {
		if !math.IsNaN(e.Err) {
			n[e.Source]++
			xs = append(xs, SourcedError{e.Source, math.Abs(e.Err)})
		}
	}
	if len(xs) == 0 {
		return 0
	}
	slices.SortStableFunc(xs, func(a, b SourcedError) int { return cmp.Compare(a.Err, b.Err) })
	s, w := float64(len(n)), 0.0
	for _, x := range xs {
		w += 1 / (float64(n[x.Source]) * s)
		if w >= q-1e-12 {
			return x.Err
		}
	}
	return xs[len(xs)-1].Err
}
