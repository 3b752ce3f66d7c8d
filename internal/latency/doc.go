// Package latency is tokentrace's shared vocabulary: the stages an LLM
// request's latency is made of, the metrics computed from them, service level
// objectives, and the per-request record that the load generator writes and
// the report reads. It depends on the standard library only, so every other
// package (engine, bench, report, gateway) can import it.
//
// The formulas behind every name here are written out in docs/metrics.md.
//
// It must never import a package of this module (internal/cli's
// TestImportRules checks it).
package latency
