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
// The package is split by job: proxy.go (the handler: a request's way
// through), policy.go and policy_*.go (the inbound policies, one-method
// types in a chain: key, body, route, length, key limits, upstream model,
// priority, deadline), queue.go (admission: internal/route's queue under a
// mutex, with blocking waits), forward.go (the attempts as a state
// machine: retry, hedge, fallback), attempt.go (one attempt's upstream
// I/O up to the first token), stream.go (relaying the answer, event by
// event), headers.go (hop-by-hop headers), scan.go (reading the few
// request fields the gateway needs), config.go (YAML configuration:
// defaults, validation, hot reload), route.go (replica state; the
// balancers are internal/route's), limits.go (per-key limits), timing.go
// (stages and Server-Timing), metrics.go (Prometheus), tracing.go
// (OpenTelemetry), server.go (the process). docs/gateway.md describes it
// for users.
//
// It never imports serve, engine, perfmodel, bench, app, report or
// simulate: it proxies to any OpenAI-compatible server and shares only
// internal/route's placement policies with the simulator; only
// internal/cli imports it.
package gateway
