//go:build unix

package redistest

import (
	"os"
	"syscall"
)

// stop and cont pause and continue a process (SIGSTOP, SIGCONT).
func stop(p *os.Process) error { return p.Signal(syscall.SIGSTOP) }
func cont(p *os.Process) error { return p.Signal(syscall.SIGCONT) }
