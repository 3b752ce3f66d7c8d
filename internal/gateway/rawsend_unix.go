//go:build unix

package gateway

import (
	"errors"
	"syscall"
)

// rawWrites: streamed chunks may go below net/http's writer (rawSend).
const rawWrites = true

// writeOnce is try's one write(2) on the connection's descriptor (again
// when a signal interrupted it); it never waits.
func (r *rawSend) writeOnce(fd uintptr) bool {
	for {
		r.n, r.errno = syscall.Write(int(fd), r.out)
		if !errors.Is(r.errno, syscall.EINTR) {
			return true
		}
	}
}
