// Package app is `tokentrace app`: a reference retrieval-augmented
// application in front of an OpenAI-compatible model server, to measure
// what an application adds to a model's latency. It holds an in-memory
// vector index over a bundled corpus (hashed bag-of-words embeddings, one
// shard per retrieval source), sequential or parallel retrieval calls with
// an added latency, reranking, prompt assembly and blocking or streaming
// output guardrails, behind an OpenAI-compatible chat endpoint; every
// stage is reported in Server-Timing (with the upstream's passed on) and
// as spans. docs/app.md is the user's guide.
//
// It never imports serve, gateway, engine, bench or report: it is a client
// of any OpenAI-compatible upstream and a server to any client, met over
// HTTP alone; only internal/cli imports it.
package app
