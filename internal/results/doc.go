// Package results writes a results folder, the output of `tokentrace
// bench` and `tokentrace simulate` that `tokentrace report` reads:
// requests.jsonl (one latency.Record per line, appended as each request
// ends), summary.json, run.json (internal/report's RunInfo), command.txt,
// config.json and, for a simulation asked for it, steps.jsonl.
//
// It imports nothing of this module but internal/field and
// internal/latency.
package results
