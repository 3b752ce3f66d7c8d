// Package openai holds the wire types of the HTTP APIs tokentrace speaks
// (API): OpenAI's chat completions, completions and Responses, Anthropic's
// Messages and Ollama's native chat — requests, answers, stream chunks and
// events, and each API's error shape. Request decoding matches keys
// exactly and refuses duplicated keys (keys.go), as OpenAI's API does.
// ScanChunk is the project's one chunk classifier, with the same exact
// keys, for every API's stream events and whole answers: bench times and
// counts them with it, the gateway classifies the events it relays
// (content, reasoning, role-only, usage, finish, error, end), the app
// reads its upstream's answer.
//
// It imports nothing of this module but internal/jsonscan.
package openai
