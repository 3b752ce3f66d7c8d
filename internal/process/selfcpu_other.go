//go:build !unix

package process

import "time"

// SelfCPU is 0 where the platform offers no getrusage: a caller reports
// no CPU use rather than a wrong one.
func SelfCPU() time.Duration { return 0 }
