//go:build race

package simulate_test

// raceEnabled reports a -race build, whose slowdown of the wall-clock
// client and server the bench comparison would measure.
const raceEnabled = true
