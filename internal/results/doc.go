// Package results owns the results folder, the output of `tokentrace
// bench` and `tokentrace simulate` that report, calibrate, plan and the
// what-if read: its file names, requests.jsonl (one latency.Record per
// line, appended as each request ends; the fast decoder and the one
// sequential reader, versioned by latency.RecordSchema), run.json
// (RunInfo), config.json, command.txt, summary.json and, for a simulation
// asked for it, steps.jsonl; and the requests as the server saw them
// (ReadObserved: arrivals and lengths for calibration and replay). No
// other package names the folder's files.
//
// It imports nothing of this module but internal/field, internal/jsonscan
// and internal/latency.
package results
