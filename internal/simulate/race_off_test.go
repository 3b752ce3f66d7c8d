//go:build !race

package simulate_test

const raceEnabled = false
