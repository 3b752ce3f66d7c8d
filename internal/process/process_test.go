package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

const childEnv = "TOKENTRACE_PROCESS_CHILD"

// TestMain runs this test binary as the child the tests start:
// "serve ADDR" serves /health (and spins on /spin until it has used some
// CPU), ignoring interrupts when asked; "exit" exits at once; "stderr"
// writes a line to each output and exits 4; "sleep"
// sleeps for an hour; "echo" copies its input to its output; "parent"
// starts a "sleep" child through StartCmd, prints its pid and sleeps.
func TestMain(m *testing.M) {
	switch mode := os.Getenv(childEnv); mode {
	case "":
		os.Exit(m.Run())
	case "exit":
		fmt.Println("exiting at once")
		os.Exit(3)
	case "stderr":
		fmt.Println("to stdout")
		fmt.Fprintln(os.Stderr, "to stderr")
		os.Exit(4)
	case "sleep":
		time.Sleep(time.Hour)
		os.Exit(1)
	case "echo":
		_, _ = io.Copy(os.Stdout, os.Stdin)
		os.Exit(0)
	case "parent":
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=sleep")
		if err := StartCmd(cmd); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println(cmd.Process.Pid)
		time.Sleep(time.Hour)
		os.Exit(1)
	case "serve", "serve-deaf":
		if mode == "serve-deaf" {
			signal.Ignore(os.Interrupt)
		}
		http.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {})
		http.HandleFunc("/spin", func(w http.ResponseWriter, r *http.Request) {
			for t := time.Now(); time.Since(t) < 300*time.Millisecond; {
			}
		})
		fmt.Println("serving")
		_ = http.ListenAndServe(os.Getenv(childEnv+"_ADDR"), nil)
		os.Exit(1)
	}
}

func child(t *testing.T, mode, addr string) (*Proc, *Log) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, childEnv+"_ADDR="+addr)
	log := &Log{}
	cmd.Stdout, cmd.Stderr = log, log
	p, err := Start(mode, cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(0) })
	return p, log
}

func TestReadyThenStopped(t *testing.T) {
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	p, log := child(t, "serve", addr)
	if err := p.WaitReady(context.Background(), "http://"+addr+"/health", time.Minute); err != nil {
		t.Fatalf("%v (log %q)", err, log.String())
	}
	if log.Len() == 0 || log.String() != "serving\n" {
		t.Errorf("log %q", log.String())
	}
	if runtime.GOOS == "linux" {
		resp, err := http.Get("http://" + addr + "/spin")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if p.CPU() <= 0 {
			t.Errorf("CPU %v after the child spun for 300 ms", p.CPU())
		}
	}
	p.Stop(time.Minute)
	select {
	case <-p.Exited():
	default:
		t.Error("Stop returned before the process exited")
	}
}

func TestWaitReadyNoticesAnEarlyExit(t *testing.T) {
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	p, log := child(t, "exit", addr)
	err = p.WaitReady(context.Background(), "http://"+addr+"/health", 10*time.Minute)
	if !errors.Is(err, ErrExited) {
		t.Errorf("WaitReady: %v, want ErrExited", err)
	}
	if log.String() != "exiting at once\n" {
		t.Errorf("log %q", log.String())
	}
}

// TestCombinedOutput: the child's output and its exit, as
// cmd.CombinedOutput gives them.
func TestCombinedOutput(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=exit")
	out, err := CombinedOutput(cmd)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Errorf("error %v, want exit status 3", err)
	}
	if string(out) != "exiting at once\n" {
		t.Errorf("output %q", out)
	}
	set := exec.Command(os.Args[0], "-test.run=^$")
	set.Stdout = io.Discard
	if _, err := CombinedOutput(set); err == nil || set.Process != nil {
		t.Errorf("a command with its Stdout set: error %v, started %v; want refused, not started", err, set.Process != nil)
	}
}

// TestOutput: the child's standard output, and its standard error in the
// exit error where Stderr was unset, as cmd.Output gives them.
func TestOutput(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=stderr")
	out, err := Output(cmd)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 4 || string(ee.Stderr) != "to stderr\n" {
		t.Errorf("error %v (stderr %q), want exit status 4 with \"to stderr\\n\"", err, stderrOf(ee))
	}
	if string(out) != "to stdout\n" {
		t.Errorf("output %q", out)
	}
	var errb strings.Builder
	directed := exec.Command(os.Args[0], "-test.run=^$")
	directed.Env = append(os.Environ(), childEnv+"=stderr")
	directed.Stderr = &errb
	if _, err := Output(directed); !errors.As(err, &ee) || ee.Stderr != nil || errb.String() != "to stderr\n" {
		t.Errorf("a command with its Stderr set: error %v, exit error's stderr %q, its Stderr %q; want the child's there only", err, stderrOf(ee), errb.String())
	}
	set := exec.Command(os.Args[0], "-test.run=^$")
	set.Stdout = io.Discard
	if _, err := Output(set); err == nil || set.Process != nil {
		t.Errorf("a command with its Stdout set: error %v, started %v; want refused, not started", err, set.Process != nil)
	}
}

func stderrOf(ee *exec.ExitError) []byte {
	if ee == nil {
		return nil
	}
	return ee.Stderr
}

func TestStopKillsAProcessThatIgnoresTheInterrupt(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no interrupts on Windows: Stop kills at once")
	}
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	p, log := child(t, "serve-deaf", addr)
	if err := p.WaitReady(context.Background(), "http://"+addr+"/health", time.Minute); err != nil {
		t.Fatalf("%v (log %q)", err, log.String())
	}
	p.Stop(50 * time.Millisecond)
	select {
	case <-p.Exited():
	default:
		t.Fatal("still running after Stop")
	}
	if p.Cmd.ProcessState == nil || p.Cmd.ProcessState.Success() {
		t.Errorf("state %v, want killed", p.Cmd.ProcessState)
	}
	var nilProc *Proc
	nilProc.Stop(0) // no-op
	if nilProc.CPU() != 0 {
		t.Error("a nil process has CPU time")
	}
}

func TestTailFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte("a\nb\nc\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := TailFile(path, 2); got != "b\nc" {
		t.Errorf("TailFile(2) = %q", got)
	}
	if got := TailFile(path, 9); got != "a\nb\nc" {
		t.Errorf("TailFile(9) = %q", got)
	}
	if got := TailFile(filepath.Join(t.TempDir(), "none"), 2); !strings.Contains(got, "no such file") {
		t.Errorf("TailFile of a missing file = %q", got)
	}
}
