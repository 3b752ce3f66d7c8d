//go:build race

package llamacpptest_test

// raceEnabled reports a -race build, about ten times slower: a test whose
// cost is the in-process calibrate (one goroutine, nothing for the race
// detector to check) skips under it.
const raceEnabled = true
