//go:build unix

package process

import (
	"syscall"
	"time"
)

// SelfCPU is this process's user + system CPU time so far (getrusage:
// its every thread, the garbage collector's included; no child's); 0 if
// the call fails.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
