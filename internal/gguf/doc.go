// Package gguf reads and writes GGUF, the single-file model format of GGML
// and the engines built on it (llama.cpp, Ollama): a header, typed
// metadata, tensor descriptions and aligned tensor data, little-endian
// (ggml's docs/gguf.md, version 3).
//
// Write writes a whole file from metadata and tensors; ReadMetadata reads
// a file's header, metadata and tensor descriptions (never the tensor
// data), every count and length bounded, for tools that size a model from
// its file. RandomLlama writes a small llama-architecture model with
// random weights and its own vocabulary, deterministic from a seed, for
// tests against real engines.
//
// It imports nothing of this module (standard library only).
package gguf
