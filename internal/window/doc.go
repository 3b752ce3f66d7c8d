// Package window cuts a run into fixed time windows and computes, per
// window, what the report's time series and bench's live view show: TTFT,
// TPOT, ITL and E2E percentiles, the offered and achieved rates, requests
// in flight, failures by kind and the server's scraped gauges.
//
// There is one definition of a window (docs/metrics.md, "Windows"): window
// k is [k·W, (k+1)·W) on the records' clock (nanoseconds since the run's
// start), and a request belongs, with all its values, to the window its
// completion falls in. A [Series] takes records one at a time, in any
// order, so the same code serves a finished run and one in progress.
//
// It imports internal/latency and internal/stats only.
package window
