package capacity

import (
	"math"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
)

// StatedError is the twin's own stated relative error for metric m at
// percentile p: the profile's calibration residual for the metric (P50,
// P90 or P99, the nearest at or above p), never below the two-clock
// differential's limit for the engine itself (docs/simulate.md,
// "Accuracy"): 5 % up to P90, 10 % above. Without a profile (nil), or one
// without residuals for m, it is that limit.
func StatedError(prof *perfmodel.Profile, m latency.Metric, p float64) float64 {
	limit := 0.05
	if p > 90 {
		limit = 0.10
	}
	if prof == nil {
		return limit
	}
	res, ok := prof.Residuals[string(m)]
	if !ok {
		return limit
	}
	v := res.P99
	switch {
	case p <= 50:
		v = res.P50
	case p <= 90:
		v = res.P90
	}
	return math.Max(limit, v)
}
