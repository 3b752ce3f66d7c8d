// Package racedetect says whether this binary was built with the race
// detector (go test -race): Enabled, set by the build tags race and !race.
// Tests whose cost is computation the detector has nothing to check in
// (one goroutine simulating, fitting or comparing against a wall clock it
// slows about ten times) skip under it.
//
// It imports nothing of this module (standard library only).
package racedetect
