//go:build unix

package httplimit

import "syscall"

// openFileLimit is the process's soft limit on open descriptors (which the
// Go runtime raises to the hard limit at start).
func openFileLimit() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return fallbackFileLimit
	}
	return int(min(r.Cur, 1<<30)) // RLIM_INFINITY is the largest uint64
}
