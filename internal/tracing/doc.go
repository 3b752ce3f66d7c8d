// Package tracing is what every tokentrace hop (bench's client, the app,
// the gateway, serve) shares for OpenTelemetry traces: the OTLP/HTTP
// exporter, the W3C trace-context propagator, and one child span per
// stage of a request, so that one request is one trace in any OTLP
// backend with each hop's Server-Timing split as spans
// (docs/metrics.md, "Traces"); and the OpenTelemetry GenAI metrics
// (semantic conventions 1.41.0) serve, the gateway and bench export over
// OTLP/HTTP beside them, with the conventions' span names and attributes
// for inference, agent and tool spans.
//
// It imports nothing of this module but internal/latency and
// internal/redact.
package tracing
