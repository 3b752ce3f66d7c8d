// Package npmtest drives tokentrace serve, and the gateway in front of it,
// with the official npm SDK clients applications use: the Vercel AI SDK
// (ai with @ai-sdk/openai-compatible), openai and @anthropic-ai/sdk, at
// the exact versions testdata/package.json pins.
//
// The clients are installed by .ci/run (npm ci in testdata); the tests
// never reach the network and skip when node or the installed clients are
// absent. Its code imports nothing of this module; its tests import serve
// and the gateway they run.
package npmtest
