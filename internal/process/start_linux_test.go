package process

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestChildDiesWithItsParent: a parent killed outright (SIGKILL, as go
// test's -timeout ends a test binary: no cleanup runs) takes the child it
// started through StartCmd with it. The parent is this test binary in
// "parent" mode; its child sleeps for an hour unless killed.
func TestChildDiesWithItsParent(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=parent")
	cmd.Stdout, cmd.Stderr = w, os.Stderr
	parent, err := Start("parent", cmd)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { parent.Stop(0) })
	pid := readPID(t, r, "the parent")
	if !alive(pid) {
		t.Fatalf("the child %d is not running before its parent is killed", pid)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-parent.Exited()
	if waitGone(pid); alive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the child %d still runs a minute after its parent was killed", pid)
	}
}

// TestChildOutlivesTheThreadThatStartedIt: a child started from a
// goroutine that exits locked to its thread, which Go then ends, still
// runs — Linux's parent-death signal follows the thread that forked, and
// StartCmd must not fork on the caller's. The child echoes its input: a
// killed one would close its output instead.
func TestChildOutlivesTheThreadThatStartedIt(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=echo")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	tid := startOnAThreadThatEnds(t, cmd)
	t.Cleanup(func() { _ = in.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	task := fmt.Sprintf("/proc/self/task/%d", tid)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(task); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d still exists a minute after its goroutine exited locked to it", tid)
		}
	}
	if _, err := io.WriteString(in, "ping\n"); err != nil {
		t.Fatalf("writing to the child after its starting thread ended: %v", err)
	}
	got, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || got != "ping\n" {
		t.Fatalf("the child's echo after its starting thread ended: %q, %v (killed with that thread?)", got, err)
	}
}

// startOnAThreadThatEnds starts cmd through StartCmd from a goroutine
// that exits locked to its thread, and returns that thread's id. The main
// thread is never ended (Go parks it instead), so a goroutine that finds
// itself there lets go and another tries.
func startOnAThreadThatEnds(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	type started struct {
		tid int
		err error
	}
	for {
		ch := make(chan started, 1)
		go func() {
			runtime.LockOSThread()
			tid := syscall.Gettid()
			if tid == syscall.Getpid() {
				runtime.UnlockOSThread()
				ch <- started{}
				return
			}
			ch <- started{tid, StartCmd(cmd)} // exits still locked: Go ends the thread
		}()
		s := <-ch
		if s.err != nil {
			t.Fatal(s.err)
		}
		if s.tid != 0 {
			return s.tid
		}
	}
}

// alive reports whether pid is a process that has not exited (a zombie,
// exited but not yet reaped by whoever adopted it, counts as exited).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	f := strings.Fields(string(stat[i+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// readPID reads the first line of r, where who (a parent process) writes
// the pid of a child it started.
func readPID(t *testing.T, r io.Reader, who string) int {
	t.Helper()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatalf("%s's child's pid: %v", who, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("%s said %q, not its child's pid", who, line)
	}
	return pid
}

// waitGone waits up to a minute for pid to end (a killed process's end
// is not at once: its parent, or init, reaps it).
func waitGone(pid int) {
	for deadline := time.Now().Add(time.Minute); alive(pid) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
}
