// Package agent is the tool side of agent sessions (docs/bench.md, "Agent
// sessions"): the tool endpoint's wire form, the built-in tool simulator
// that answers each call after the latency the workload drew for it, and
// the caller with which bench makes a step's tool calls, at once or one
// after another, each bounded by a timeout, and records their spans.
//
// It never imports serve, gateway, app, bench, engine, report or simulate:
// bench calls it, and its tool server is met over HTTP alone.
package agent
