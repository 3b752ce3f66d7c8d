//go:build race

package calibrate

// raceEnabled reports a -race build, about ten times slower: tests that
// only compute (calibrate runs on one goroutine, so the race detector has
// nothing to check in them) skip under it.
const raceEnabled = true
