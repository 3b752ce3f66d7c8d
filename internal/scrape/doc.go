// Package scrape reads an inference server's Prometheus /metrics: one
// parser for the text exposition (github.com/prometheus/common/expfmt),
// and the names each serving engine gives the figures tokentrace reasons
// with — requests running and waiting, KV-cache usage, preemptions,
// prefix-cache lookups and hits — and its configuration where it exposes
// it (vLLM's vllm:cache_config_info, tokentrace's
// tokentrace:scheduler_config_info). bench records the server's evidence
// with it during a run; the gateway routes on it.
//
// It imports nothing of this module.
package scrape
