// Package process runs the child processes that harnesses and tests start
// beside the one under test (proxies, engines, load clients, databases,
// browsers) and the one-off commands they run: the one way to start them
// (StartCmd; Start watching the exit; Run, Output and CombinedOutput
// waiting for it, as exec.Cmd's do), so that on Linux each is killed when
// the process that started it ends, however it ends (go test's -timeout
// runs no cleanup); CommandGroup for a command whose own children must end
// with it when its context does; a free loopback port, a log safe to read
// while it writes (and a log file's last lines for an error, TailFile), a
// readiness wait that notices an early exit, a stop (an interrupt, then a
// kill after a grace) and its CPU time read from /proc; and this
// process's own CPU time (SelfCPU).
//
// It imports nothing of this module (standard library only).
package process
