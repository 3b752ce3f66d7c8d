// Package ollamatest runs a real inference engine nobody on this project
// wrote — Ollama's `ollama serve`, CPU only, with a small random-weight
// model this project writes (internal/enginetest's, through
// internal/gguf) — on a loopback port for tests.
//
// The engine comes from the Go module proxy: .ci/run installs it with
// `go install github.com/ollama/ollama@VERSION` into GOPATH's bin (docs/
// engines.md says what its build needs). Find looks for it there, on PATH
// or at TOKENTRACE_OLLAMA; a test that needs it skips, saying so, where
// there is none.
//
// Start runs `ollama serve` with everything of its own (OLLAMA_HOST on a
// free loopback port, OLLAMA_MODELS and HOME in the test's temporary
// directory, OLLAMA_NUM_PARALLEL, OLLAMA_KEEP_ALIVE), waits for it to
// answer, imports the model with `ollama create` from a Modelfile (its
// thread count and context as PARAMETERs) and stops the server, its model
// runner with it, when the test ends.
//
// It imports internal/enginetest (the model), internal/gguf (its shape)
// and internal/process (start-up and stop).
package ollamatest
