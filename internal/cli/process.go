package cli

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Runtime settings during a bench run and its self-test (process
// settings, so the command line's, not package bench's). A GC cycle's
// mark phase takes a share of the 2 processors a small machine has and
// delays the goroutines stamping arrivals (the self-test's P99 TTFT error
// fell from 0.84–1.77 ms to 0.51–0.64 ms at 1,000 streams at GOGC 400
// against 100, docs/performance.md), so cycles are few: between two, the
// heap may grow gcHeadroom bytes past the live set, as a GOGC set after
// each cycle between gcMinPercent and gcMaxPercent. A fixed GOGC 400 let
// the heap reach 60–70 MB over a 12 MB live set at 1,400 streams (each
// with its buffers and 8 KiB of stack) before its first cycle; GOGC 50 at
// the least keeps the cycles' CPU bounded at 10,000. A soft memory limit
// bounds both. No heap profile is read in a run, so none is sampled.
const (
	gcMaxPercent = 400
	gcMinPercent = 50
	gcHeadroom   = 8 << 20
	runMemLimit  = 1 << 30
)

// tuneGC applies the run's GC settings unless the user set GOGC or
// GOMEMLIMIT, and returns a function restoring the previous ones.
func tuneGC() (restore func()) {
	undo := []func(){func(r int) func() { return func() { runtime.MemProfileRate = r } }(runtime.MemProfileRate)}
	runtime.MemProfileRate = 0
	if os.Getenv("GOGC") == "" {
		prev := debug.SetGCPercent(gcMaxPercent)
		stop := startGCTuner()
		undo = append(undo, func() { stop(); debug.SetGCPercent(prev) })
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

// gcPercent is the GOGC that lets the heap grow gcHeadroom bytes past a
// cycle's live heap before the next (the runtime's goal is live + (live +
// stacks + globals) × GOGC/100), within [gcMinPercent, gcMaxPercent].
func gcPercent(live, stacks, globals uint64) int {
	base := live + stacks + globals
	if base == 0 {
		return gcMaxPercent
	}
	p := uint64(gcHeadroom) * 100 / base
	return int(min(max(p, gcMinPercent), gcMaxPercent))
}

// gcSentinel is an object left unreachable at once, so that its cleanup
// runs after the next GC cycle (its pointer keeps it off the tiny
// allocator, whose blocks are freed together).
type gcSentinel struct {
	_ *int
	_ [2]uint64
}

// startGCTuner sets GOGC from gcPercent after every GC cycle until stop
// is called (no setting of its own after stop returns): one small
// allocation and one metrics read per cycle.
func startGCTuner() (stop func()) {
	var mu sync.Mutex
	stopped := false
	samples := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/scan/stack:bytes"},
		{Name: "/gc/scan/globals:bytes"},
	}
	var arm func()
	arm = func() {
		runtime.AddCleanup(new(gcSentinel), func(struct{}) {
			mu.Lock()
			defer mu.Unlock()
			if stopped {
				return
			}
			metrics.Read(samples)
			debug.SetGCPercent(gcPercent(samples[0].Value.Uint64(), samples[1].Value.Uint64(), samples[2].Value.Uint64()))
			arm()
		}, struct{}{})
	}
	arm()
	return func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
	}
}
