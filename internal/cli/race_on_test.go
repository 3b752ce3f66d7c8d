//go:build race

package cli

// raceEnabled reports a -race build, about ten times slower: a test that
// only weighs more simulations (not more concurrency) skips under it.
const raceEnabled = true
