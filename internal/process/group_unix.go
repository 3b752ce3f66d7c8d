//go:build unix

package process

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// ownGroup makes cmd's child the leader of a new process group (its id
// the child's pid), and its cancellation a SIGKILL to that whole group.
func ownGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.Cancel = func() error { return signalTree(cmd, os.Kill) }
}

// signalTree sends sig to cmd's child, and to its whole process group where
// the child leads one of its own (CommandGroup), as a terminal signals
// its foreground group.
func signalTree(cmd *exec.Cmd, sig os.Signal) error {
	a := cmd.SysProcAttr
	s, ok := sig.(syscall.Signal)
	if !ok || a == nil || !a.Setpgid || a.Pgid != 0 {
		return cmd.Process.Signal(sig)
	}
	err := syscall.Kill(-cmd.Process.Pid, s)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone // the group has no process left
	}
	return err
}
