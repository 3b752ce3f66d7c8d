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
// SlotEngine is its stand-in engine with slots: a fixed number of
// requests run at once and the rest queue, answering in one engine's
// documented shapes (vLLM's per-request metrics, llama.cpp's timings,
// SGLang's, TGI's or llama.cpp's gauges, Ollama's bare OpenAI endpoint),
// with a log of each request's own queue wait for tests to compare with
// what a client recorded.
//
// KVFixture reads the KV-transfer protocol's fixtures (internal/openai's
// testdata) for the tests of both of its sides, the gateway's router and
// serve's instances.
//
// It imports nothing of this module but internal/sse (its streams are
// written with sse.Writer).
package openaitest
