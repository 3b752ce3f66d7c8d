//go:build !unix

package redistest

import (
	"errors"
	"os"
)

var errNoStop = errors.New("redistest: pausing a process needs SIGSTOP (unix only)")

// stop and cont have no equivalent without unix signals; redis-server is
// not run there, so no test reaches them.
func stop(*os.Process) error { return errNoStop }
func cont(*os.Process) error { return errNoStop }
