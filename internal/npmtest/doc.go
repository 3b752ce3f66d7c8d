// Package npmtest drives tokentrace serve, and the gateway in front of it,
// with the official npm SDK clients applications use: the Vercel AI SDK
// (ai with @ai-sdk/openai-compatible), openai and @anthropic-ai/sdk, at
// the exact versions testdata/package.json pins.
//
// The clients are installed by .ci/run (npm ci in testdata); the tests
// never reach the network and skip when node or the installed clients are
// absent. The same clients run against a real engine, Ollama
// (internal/ollamatest starts it; skipped where it is not installed),
// directly and with the gateway in front. Its code imports nothing of
// this module; its tests import serve, the gateway and Ollama's starter.
package npmtest
