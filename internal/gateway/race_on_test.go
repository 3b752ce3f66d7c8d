//go:build race

package gateway

// raceEnabled reports a -race build, whose 5-10x slowdown of the
// in-process client makes sub-millisecond wall-time checks meaningless.
const raceEnabled = true
