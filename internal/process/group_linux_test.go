package process

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestCommandGroupEndsTheTree: a shell that starts a sleeping grandchild
// is killed by its context's end, and the grandchild with it — the
// parent-death signal and exec.CommandContext's own cancellation reach
// the shell alone. A plain exec.CommandContext is the control: its
// grandchild outlives the shell (else the test would prove nothing).
func TestCommandGroupEndsTheTree(t *testing.T) {
	for _, c := range []struct {
		name    string
		command func(context.Context, string, ...string) *exec.Cmd
		gone    bool
	}{
		{"CommandGroup", CommandGroup, true},
		{"exec.CommandContext", exec.CommandContext, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cmd := c.command(ctx, "/bin/sh", "-c", "sleep 3600 & echo $!; wait")
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := StartCmd(cmd); err != nil {
				t.Fatal(err)
			}
			pid := readPID(t, out, "the shell")
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
			if !alive(pid) {
				t.Fatalf("the grandchild %d is not running before the shell is killed", pid)
			}
			cancel()
			if err := cmd.Wait(); err == nil {
				t.Error("the shell exited cleanly after its context ended, not killed")
			}
			if c.gone {
				waitGone(pid)
			}
			if gone := !alive(pid); gone != c.gone {
				t.Errorf("the grandchild gone after its shell was killed: %v, want %v", gone, c.gone)
			}
		})
	}
}

// TestStopEndsTheGroup: Stop of a process started from CommandGroup ends
// its descendants too — here a shell that an interrupt ends while its
// background sleep, which ignores interrupts, would run on.
func TestStopEndsTheGroup(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := CommandGroup(context.Background(), "/bin/sh", "-c", "sleep 3600 & echo $!; wait")
	cmd.Stdout = w
	p, err := Start("sh", cmd)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	pid := readPID(t, r, "the shell")
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	p.Stop(time.Minute)
	waitGone(pid)
	if alive(pid) {
		t.Errorf("the shell's sleep %d runs on after Stop", pid)
	}
}
