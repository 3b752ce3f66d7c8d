//go:build !linux

package process

import "os/exec"

// startCmd starts cmd; only Linux has a parent-death signal, so elsewhere
// a child may outlive this process when it ends without its cleanups.
func startCmd(cmd *exec.Cmd) error { return cmd.Start() }
