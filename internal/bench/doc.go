// Package bench is `tokentrace bench`: a load generator for any
// OpenAI-compatible server whose numbers are right. It schedules requests
// on absolute instants (open loop at a rate, closed loop at a concurrency,
// or both), timestamps bytes as they arrive, records one latency.Record
// per request in requests.jsonl as each finishes, and summarises the run
// with internal/report, the same code as `tokentrace report`.
//
// docs/bench.md is the user's guide; docs/metrics.md defines every number.
//
// It never imports serve, gateway, app, engine, perfmodel or simulate: it
// measures any target over HTTP alone (internal/cli wires the embedded
// serve in); only internal/cli imports it.
package bench
