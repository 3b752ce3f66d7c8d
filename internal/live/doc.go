// Package live is a run's view while it happens: bench --live's page and
// the terminal table (--progress table), fed from the same Board.
//
// A Board is told of every send (Sent, an atomic count) and every finished
// record (Done, an append to a batch under a lock held for that append
// only); its own goroutine (Run) drains the batch on each tick and
// computes a Snapshot: the rates and percentiles of the last sliding
// window (the last n of internal/window's one-second windows, a
// stats.Sketch per metric, within 0.39 %), the stage
// split of that window, failures by kind, the server's scraped gauges,
// bench's timekeeping warnings, and — from the run's report.Collector,
// which the board feeds on its goroutine (bench hands it every record
// through Done instead of adding it on the record path) — the "since
// start" numbers and the report's findings on the records so far
// (provisional), recomputed only while someone watches (an /events
// stream, a terminal view), every 2 s, or no more often than 1,000 ×
// what the last computation took, and (Config.CPU) only once the process
// has spent 300 × its expected CPU cost since the last (the last one's
// cost per record × the records now: each is paid for before it runs). Finish takes in the last records and
// run.json and returns the run's report: the last snapshot's "since
// start" numbers are that report's.
//
// Nothing the page or the table does reaches back to the record path: a
// snapshot is published as encoded JSON behind an atomic pointer, and
// each SSE client (internal/sse's Writer) reads the latest one when told a
// new one exists; a slow or absent browser only delays its own stream,
// which skips to the latest snapshot (with the history points it
// skipped) and counts what it skipped (Streams).
//
// The page is one self-contained HTML document (inline CSS, JS and SVG);
// Handler serves it, /events (SSE) and /snapshot.json. Serve runs it with
// httplimit's deadlines and lifecycle.
//
// The gateway's view (Config.Gateway, the gateway's /live) is the same
// board and page over the gateway's own records: handed over by Offer,
// which never waits (a full hand-off drops and counts), split by each
// record's Timing (the gateway's stages), broken down per pool and per
// upstream with each pool's admission, and without a report.
//
// It never imports bench, serve, gateway, app, engine or simulate: bench
// feeds it; the report's rules and the results' schema it reads.
package live
