//go:build !race

package llamacpptest_test

const raceEnabled = false
