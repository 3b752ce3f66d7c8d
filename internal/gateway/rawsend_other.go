//go:build !unix

package gateway

// rawWrites: off where a socket's descriptor takes no non-blocking
// write(2); streamed chunks go through net/http's writer.
const rawWrites = false

// writeOnce is never called where rawWrites is false.
func (r *rawSend) writeOnce(uintptr) bool { return true }
