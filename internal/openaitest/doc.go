// Package openaitest is the project's one fake OpenAI-compatible upstream
// for tests: a server whose answers are configured field by field — a
// generated stream on a known schedule (time to first token, gap, chunks,
// a gate that releases each chunk), continuous or final usage, a
// Server-Timing header or trailer, an error status, a connection cut
// mid-stream, a scripted body written as is (any stream shape, broken
// ones included), a connection held open after the answer with or without
// keep-alive comments, an answer without end — and that counts what it
// saw (requests served, in flight, cancelled, closed by the client) and
// keeps each request's headers and body. The gateway's and the app's
// tests use it instead of writing fake upstreams of their own.
//
// It imports nothing of this module but internal/sse (its streams are
// written with sse.Writer).
package openaitest
