// Package process runs the child processes that harnesses and tests start
// beside the one under test — a proxy (nginx, the gateway, the Go floor
// proxy) in bench/floor, llama.cpp's llama-server in llamacpptest, a load
// client in serve's stream benchmark: a free loopback port for it, a log
// safe to read while it writes, a readiness wait that notices an early
// exit, a stop (an interrupt, then a kill after a grace) and its CPU time
// read from /proc.
//
// It imports nothing of this module (standard library only).
package process
