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
	cmd.Cancel = func() error {
		err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone // the group has no process left
		}
		return err
	}
}
