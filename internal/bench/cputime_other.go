//go:build !unix

package bench

import "time"

// CPUTime is the process's user + system CPU time; 0 where the platform
// offers no getrusage (the client-health check then reports no CPU use
// instead of a wrong one).
func CPUTime() time.Duration { return 0 }
