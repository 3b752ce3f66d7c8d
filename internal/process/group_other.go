//go:build !unix

package process

import (
	"os"
	"os/exec"
)

// ownGroup leaves cmd as it is: without Unix process groups, ctx's end
// kills the child alone (exec.CommandContext's Cancel).
func ownGroup(*exec.Cmd) {}

// signalTree sends sig to cmd's child alone.
func signalTree(cmd *exec.Cmd, sig os.Signal) error { return cmd.Process.Signal(sig) }
