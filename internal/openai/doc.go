// Package openai holds the OpenAI-compatible HTTP API's wire types: requests,
// responses, stream chunks, and the error shape every endpoint answers with.
// Request decoding matches keys exactly and refuses duplicated keys
// (keys.go), as OpenAI's API does. ScanChunk is the project's one chunk
// classifier, with the same exact keys: bench times and counts streamed
// chunks and whole answers with it, the gateway classifies the events it
// relays (content, role-only, usage, finish, error), the app reads its
// upstream's answer.
//
// It imports nothing of this module but internal/jsonscan.
package openai
