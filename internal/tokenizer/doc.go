// Package tokenizer is tokentrace's deterministic built-in tokenizer. It
// needs no vocabulary file and is fast enough to run on every request, so the
// simulated engine knows each prompt's exact length and a load generator that
// builds prompts with Filler gets exactly the input length it asked for.
//
// The rule (docs/tokenizer.md): a token is a run of at most MaxRun letters or
// digits (longer runs are split every MaxRun bytes), or any single other
// non-space character (punctuation, symbols, each byte of non-ASCII text
// that is not a letter or digit). White space separates tokens and is never
// one. A token's id is the FNV-1a hash of its bytes, modulo VocabSize.
//
// A chat prompt is, for each message, one token for its role followed by the
// tokens of its content (EncodeChat); this is the whole chat template.
//
// It imports nothing of this module (standard library only).
package tokenizer
