package cli

import (
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
)

func TestGCPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name                  string
		live, stacks, globals uint64
		want                  int
	}{
		{"nothing yet", 0, 0, 0, gcMaxPercent},
		{"small live set: GOGC 400", 1 * mib, 512 << 10, 0, gcMaxPercent},
		{"8 MiB over 4 MiB: 200", 3 * mib, 1 * mib, 0, 200},
		{"globals count: 8 MiB over 10 MiB: 80", 6 * mib, 3 * mib, 1 * mib, 80},
		{"large live set: the floor", 150 * mib, 80 * mib, 0, gcMinPercent},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := gcPercent(c.live, c.stacks, c.globals); got != c.want {
				t.Errorf("gcPercent(%d, %d, %d) = %d, want %d", c.live, c.stacks, c.globals, got, c.want)
			}
		})
	}
}

// TestGCTunerFollowsLiveHeap: with 64 MiB live the tuner sets the floor
// (8 MiB of headroom is under 50 % of it), and GOGC 400 once it is freed.
// It runs in a child process of its own: the package's other tests, run
// in parallel, hold live heap of their own that would move GOGC.
func TestGCTunerFollowsLiveHeap(t *testing.T) {
	if os.Getenv(gcTunerChild) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestGCTunerFollowsLiveHeap$", "-test.count=1")
		cmd.Env = append(os.Environ(), gcTunerChild+"=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return
	}
	prev := debug.SetGCPercent(gcMaxPercent)
	defer debug.SetGCPercent(prev)
	stop := startGCTuner()
	defer stop()
	func() {
		hold := make([][]byte, 64)
		for i := range hold {
			hold[i] = make([]byte, 1<<20)
		}
		if got := settle(gcMinPercent); got != gcMinPercent {
			t.Errorf("GOGC with 64 MiB live: %d, want %d", got, gcMinPercent)
		}
		runtime.KeepAlive(hold)
	}()
	if got := settle(gcMaxPercent); got != gcMaxPercent {
		t.Errorf("GOGC once freed: %d, want %d", got, gcMaxPercent)
	}
	stop()
	debug.SetGCPercent(77)
	runtime.GC()
	runtime.GC()
	if got := gogc(); got != 77 {
		t.Errorf("GOGC after stop: %d, want the 77 set (the tuner stopped)", got)
	}
}

// gcTunerChild marks the child process TestGCTunerFollowsLiveHeap runs in.
const gcTunerChild = "TOKENTRACE_GC_TUNER_CHILD"

// settle runs GC cycles until GOGC reads want (the tuner sets it from a
// cleanup, after the cycle) or 200 cycles passed, and returns the last read.
func settle(want int) int {
	got := 0
	for range 200 {
		runtime.GC()
		runtime.Gosched()
		if got = gogc(); got == want {
			break
		}
	}
	return got
}

// gogc reads GOGC without setting it (a set could undo the tuner's).
func gogc() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}
