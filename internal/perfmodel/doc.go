// Package perfmodel is tokentrace's model of LLM inference cost: hardware and
// model catalogs, and a roofline estimate of one engine step's duration from
// which TTFT, TPOT, KV-cache capacity and throughput are derived. The
// simulated engine times every step with it.
package perfmodel
