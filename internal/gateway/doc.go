// Package gateway is tokentrace's OpenAI-compatible proxy. It forwards
// /v1/chat/completions, /v1/completions and /v1/models to pools of upstream
// replicas, streams Server-Sent Events through one event at a time, measures
// every stage of each request (gateway-in, queue wait, upstream connect,
// upstream time to first token split into server queue + prefill + network,
// decode, post-processing, client backpressure) and defends latency SLOs with
// policies: length control, a bounded priority/deadline queue with early
// rejection and an adaptive concurrency limit, TTFT and total timeouts with
// retry, fallback and hedging, per-key rate and token limits, and routing
// (round robin, least outstanding, queue-aware, prefix affinity, length
// pools).
//
// The package is split by concern: proxy.go (the handler and the streaming
// loop), scan.go (reading the few request fields the gateway needs),
// config.go (YAML configuration, validation, hot reload), queue.go
// (admission: internal/route's queue under a mutex, with blocking waits),
// route.go (replica state and scraping; the balancers are internal/route's), limits.go (per-key limits), timing.go
// (stages and Server-Timing), metrics.go (Prometheus) and tracing.go
// (OpenTelemetry). docs/gateway.md describes it for users.
package gateway
