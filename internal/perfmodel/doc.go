// Package perfmodel is tokentrace's model of LLM inference cost: hardware and
// model catalogs, and a roofline estimate of one engine step's duration from
// which TTFT, TPOT, KV-cache capacity and throughput are derived. The
// simulated engine times every step with it.
//
// It imports nothing of this module but internal/field and internal/gguf
// (a GGUF file read as a model): never engine,
// serve, bench or gateway, which build on it.
package perfmodel
