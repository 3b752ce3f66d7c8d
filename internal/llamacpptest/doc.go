// Package llamacpptest runs a real inference engine nobody on this project
// wrote — llama.cpp's llama-server, CPU only, with the project's own small
// random-weight model (internal/enginetest) — on a loopback port for
// tests.
//
// llama.cpp comes from no package registry this project installs from, so
// its tests run only against a llama-server a user built: LLAMA_SERVER
// names the binary, and a test that needs it skips, saying so, where
// LLAMA_SERVER is unset. (internal/ollamatest's Ollama, installed by
// .ci/run from the Go module proxy, is the real engine in CI.)
//
// Start writes the model into the test's temporary directory and launches
// the server with what a client of a random-weight model needs: byte
// tokens banned so answers are valid UTF-8, one thread, Prometheus
// /metrics on, a fixed number of slots; it waits for /health and stops the
// server when the test ends.
//
// It imports internal/process (its start-up and stop), internal/enginetest
// (the model) and internal/gguf (its shape).
package llamacpptest
