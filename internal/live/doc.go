// Package live is a run's view while it happens: bench --live's page and
// the terminal table (--progress table), fed from the same Board.
//
// A Board is told of every send (Sent, an atomic count) and every finished
// record (Done, an append to a batch under a lock held for that append
// only); its own goroutine (Run) drains the batch on each tick and
// computes a Snapshot: the rates and percentiles of the last sliding
// window (one-second slots, stats.Histogram, within 0.05 %), the stage
// split of that window, failures by kind, the server's scraped gauges,
// bench's timekeeping warnings, and — from a report.Collector fed the
// same records in the same order as bench's — the "since start" numbers
// and the report's findings on the records so far (provisional), at a
// cadence that keeps their cost under 1 % of the time (they are
// recomputed no more often than 100 × what the last computation took).
// Finish computes the last snapshot from every record and the run's
// run.json: its "since start" numbers are the final report's.
//
// Nothing the page or the table does reaches back to the record path: a
// snapshot is published as encoded JSON behind an atomic pointer, and
// each SSE client (internal/sse's Writer) reads the latest one when told a
// new one exists; a slow or absent browser only delays its own stream.
//
// The page is one self-contained HTML document (inline CSS, JS and SVG);
// Handler serves it, /events (SSE) and /snapshot.json. Serve runs it with
// httplimit's deadlines and lifecycle.
//
// It never imports bench, serve, gateway, app, engine or simulate: bench
// feeds it; the report's rules and the results' schema it reads.
package live
