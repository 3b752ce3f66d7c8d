//go:build !unix

package process

import "os/exec"

// ownGroup leaves cmd as it is: without Unix process groups, ctx's end
// kills the child alone (exec.CommandContext's Cancel).
func ownGroup(*exec.Cmd) {}
