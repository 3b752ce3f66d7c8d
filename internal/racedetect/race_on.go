//go:build race

package racedetect

// Enabled reports a -race build.
const Enabled = true
