// Package sse reads and writes Server-Sent Events as OpenAI-compatible
// servers stream them: "data: {...}" events ended by a blank line, and a
// final "data: [DONE]". Reader is the project's one SSE reader: bench,
// the gateway (in block mode, relaying each event's raw bytes) and the app
// read every stream with it, with each line end the specification allows
// (LF, CRLF, a lone CR) and each event stamped at its bytes' arrival;
// Writer is the one SSE writer: serve, the app, the gateway and bench's
// loopback server frame every event with it, flushed at once (a relay's
// events that arrived together leave together), the stream's last event
// in its final form (the timing comment sharing the [DONE] event), with
// no allocation per event in steady state.
//
// It imports nothing of this module (standard library only).
package sse
