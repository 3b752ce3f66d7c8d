//go:build linux

package process

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// startCmd starts cmd with SIGKILL as its parent-death signal, so the
// kernel ends the child when this process ends, however it ends.
//
// Linux sends that signal when the thread that forked the child exits,
// not when its process does, and Go ends a thread whose goroutine exits
// locked to it (a test's, say); a child forked on such a thread would be
// killed early. So every child is forked on one goroutine that locks its
// thread for the life of the process and never exits: that thread ends
// only with the process.
func startCmd(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	req := forkRequest{cmd: cmd, done: make(chan error, 1)}
	forker() <- req
	return <-req.done
}

type forkRequest struct {
	cmd  *exec.Cmd
	done chan error
}

// forker is the channel of the goroutine that forks every child.
var forker = sync.OnceValue(func() chan<- forkRequest {
	requests := make(chan forkRequest)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread lives as long as the process
		for r := range requests {
			r.done <- r.cmd.Start()
		}
	}()
	return requests
})
