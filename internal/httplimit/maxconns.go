package httplimit

// Bounds of DefaultMaxConns.
const (
	minDefaultConns = 64
	maxDefaultConns = 65536
	// reservedFDs are the descriptors left for everything but client
	// connections (files, upstream dials, the listener).
	reservedFDs = 128
	// fallbackFileLimit stands for a descriptor limit that cannot be read.
	fallbackFileLimit = 4096
)

// DefaultMaxConns is the connection cap of a server whose every client
// connection costs fdsPerConn descriptors (a proxy: 2): the process's
// descriptor limit, less a reserve, divided among the connections, so
// that clients alone cannot exhaust the descriptors; at least 64, at most
// 65,536. Where the limit cannot be read it is taken as 4096.
func DefaultMaxConns(fdsPerConn int) int {
	fdsPerConn = max(fdsPerConn, 1)
	n := (openFileLimit() - reservedFDs) / fdsPerConn
	return min(max(n, minDefaultConns), maxDefaultConns)
}
