// Package stats holds the statistics every tokentrace command reports
// with, so that the same values give the same numbers everywhere:
//
//   - nearest-rank percentiles of a sample ([Rank], [Percentile]), exactly
//     as docs/metrics.md defines them;
//   - [Histogram], a mergeable log-linear histogram of non-negative
//     integers (nanoseconds) whose percentiles are within [RelativeError]
//     of the exact ones, with a stable JSON form, and [Concurrent], its
//     lock-free recorder; [Sketch], the same layout eight times coarser
//     (within [SketchError]) for many small, short-lived histograms. Both
//     are one bucket store (counts, exact count, sum and extremes; add,
//     add a slice in one pass, merge, reset, read percentiles) given its
//     resolution, 2^10 or 2^7 buckets per power of two;
//   - [Sample], values kept one by one up to a cap and in a Histogram
//     beyond it;
//   - bootstrap confidence intervals of a percentile ([BootstrapCI],
//     [BootstrapDiffCI]) from a random source the caller passes in.
//
// It imports nothing of tokentrace's, so any package may use it.
package stats
