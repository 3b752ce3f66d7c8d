//go:build race

package capacity

// raceEnabled reports a -race build, ten times slower: tests that only
// weigh more simulations (not more concurrency) skip under it.
const raceEnabled = true
