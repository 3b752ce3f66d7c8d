package cli

import (
	"math"
	"os"
	"runtime/debug"
)

// Garbage-collector settings during a bench run and its self-test (process
// settings, so the command line's, not package bench's): a GC cycle's mark
// phase takes a share of the 2 processors a small machine has and delays
// the goroutines stamping arrivals (the self-test's P99 TTFT error fell
// from 0.84–1.77 ms to 0.51–0.64 ms at 1,000 streams,
// docs/performance.md). Fewer, larger cycles are kept in bounds by a soft
// memory limit.
const (
	runGCPercent = 400
	runMemLimit  = 1 << 30
)

// tuneGC applies the run's GC settings unless the user set GOGC or
// GOMEMLIMIT, and returns a function restoring the previous ones.
func tuneGC() (restore func()) {
	var undo []func()
	if os.Getenv("GOGC") == "" {
		prev := debug.SetGCPercent(runGCPercent)
		undo = append(undo, func() { debug.SetGCPercent(prev) })
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		prev := debug.SetMemoryLimit(-1)
		if prev == math.MaxInt64 {
			debug.SetMemoryLimit(runMemLimit)
			undo = append(undo, func() { debug.SetMemoryLimit(prev) })
		}
	}
	return func() {
		for _, f := range undo {
			f()
		}
	}
}
