// Package llamacpptest runs a real inference engine nobody on this project
// wrote — llama.cpp's llama-server, CPU only, with a small random-weight
// model — on a loopback port for tests.
//
// The engine comes from the shared folder beside (or above) the checkout,
// shared/engines/llama.cpp: its build.sh builds llama-server once per
// machine into a cache outside the checkout (.ci/run does it before the
// tests) and make_model.py writes the model, which this package keeps in
// the same cache. A test that needs the engine is skipped, saying why,
// only where the shared folder is absent; where the folder is present
// but the engine is not built, the test fails and names the command that
// builds it, since a build (about ten minutes on two cores) does not fit
// in a test (while a build is under way, its log written in the last five
// minutes, the test skips and says so). TOKENTRACE_LLAMA_SERVER names
// another llama-server binary.
//
// Start launches the server with what a client of a random-weight model
// needs (see the shared README): byte tokens banned so answers are valid
// UTF-8, one thread, Prometheus /metrics on, a fixed number of slots; it
// waits for /health and stops the server when the test ends.
//
// It imports nothing of this module but internal/process (its start-up and
// stop).
package llamacpptest
