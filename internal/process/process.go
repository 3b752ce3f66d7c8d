package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// FreeAddr returns a loopback address ("127.0.0.1:PORT") that nothing
// listens on right now, for a child to listen on.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String(), nil
}

// Log collects a child's output; it may be read while the child writes.
type Log struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Len is the number of bytes written so far.
func (l *Log) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

// ErrExited is the error (wrapped) of a readiness wait whose process
// exited first.
var ErrExited = errors.New("the process exited")

// Proc is a started child process.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	done chan struct{}
}

// StartCmd is cmd.Start for a child that must not outlive this process:
// on Linux the child is killed (SIGKILL) when this process ends, however
// it ends — go test's -timeout or a kill included, when no cleanup runs.
// Every child a harness or test starts is started through it (or Start);
// the caller waits for it (cmd.Wait) as after cmd.Start.
func StartCmd(cmd *exec.Cmd) error { return startCmd(cmd) }

// Run is cmd.Run with cmd started by StartCmd: it waits for the child,
// which dies with this process.
func Run(cmd *exec.Cmd) error {
	if err := StartCmd(cmd); err != nil {
		return err
	}
	return cmd.Wait()
}

// CombinedOutput is cmd.CombinedOutput with cmd started by StartCmd; as
// there, a cmd whose output is already directed is refused, not
// redirected.
func CombinedOutput(cmd *exec.Cmd) ([]byte, error) {
	if cmd.Stdout != nil || cmd.Stderr != nil {
		return nil, errors.New("process: CombinedOutput of a command whose Stdout or Stderr is already set")
	}
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := Run(cmd)
	return b.Bytes(), err
}

// Output is cmd.Output with cmd started by StartCmd: the child's
// standard output, and, when cmd.Stderr is unset, its standard error in
// the *exec.ExitError of a failed run, as there. As there, a cmd whose
// Stdout is already directed is refused.
func Output(cmd *exec.Cmd) ([]byte, error) {
	if cmd.Stdout != nil {
		return nil, errors.New("process: Output of a command whose Stdout is already set")
	}
	var out, stderr bytes.Buffer
	cmd.Stdout = &out
	captured := cmd.Stderr == nil
	if captured {
		cmd.Stderr = &stderr
	}
	err := Run(cmd)
	var ee *exec.ExitError
	if captured && errors.As(err, &ee) {
		ee.Stderr = stderr.Bytes()
	}
	return out.Bytes(), err
}

// CommandGroup is exec.CommandContext for a command that starts processes
// of its own (a shell script's commands, a compiler driver's passes, go
// test's test binary, a browser's renderers): the parent-death signal
// reaches only the direct child, and ctx's end would kill only it,
// leaving its descendants running. So on Unix the child leads a process
// group of its own, which its descendants join; ctx's end kills the
// whole group (SIGKILL), and Proc.Stop signals the whole group. Being its
// own group, it no longer receives a terminal's interrupt: it ends with
// ctx, which the caller ends on one. If this process dies without ending
// ctx (a kill, go test's -timeout), the child dies with it (StartCmd) but
// its descendants are orphaned and run on. On Windows the command is
// exec.CommandContext's: ctx's end, or Stop, kills the child alone.
func CommandGroup(ctx context.Context, name string, arg ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, arg...)
	ownGroup(cmd)
	return cmd
}

// Start starts cmd (its output already directed by the caller) as
// StartCmd does and watches for its exit; name names it in errors.
func Start(name string, cmd *exec.Cmd) (*Proc, error) {
	if err := StartCmd(cmd); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &Proc{Name: name, Cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Exited is closed once the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.done }

// WaitReady polls url every 50 ms until it answers 200 and returns nil;
// it returns an error when the process exits first (ErrExited), ctx ends
// or within passes.
func (p *Proc) WaitReady(ctx context.Context, url string, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second, CheckRedirect: noRedirects}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := client.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s: %w before %s answered 200", p.Name, ErrExited, url)
		case <-ctx.Done():
			return fmt.Errorf("%s: %s did not answer 200 within %v: %w", p.Name, url, within, ctx.Err())
		case <-tick.C:
		}
	}
}

// Stop ends the process — an interrupt, then a kill after grace (at once
// where interrupts cannot be sent) — and waits for it; a process started
// from CommandGroup gets both with its whole group. Stopping a nil or
// exited process is a no-op.
func (p *Proc) Stop(grace time.Duration) {
	if p == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	if err := signalTree(p.Cmd, os.Interrupt); err != nil {
		grace = 0
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = signalTree(p.Cmd, os.Kill)
		<-p.done
	}
	// What is left of a group: the interrupt may have ended its leader
	// alone (a shell's background commands ignore it).
	_ = signalTree(p.Cmd, os.Kill)
}

// CPU is the process's user + system CPU time so far with its direct
// children's (nginx's worker, say); 0 where /proc is missing.
func (p *Proc) CPU() time.Duration {
	if p == nil || p.Cmd.Process == nil {
		return 0
	}
	pid := p.Cmd.Process.Pid
	total := CPU(pid)
	children, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, c := range strings.Fields(string(children)) {
		if n, err := strconv.Atoi(c); err == nil {
			total += CPU(n)
		}
	}
	return total
}

// CPU is one process's user + system CPU time, read from /proc/PID/stat
// (clock ticks of 10 ms); 0 where /proc is missing.
func CPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which ends with ')'): utime is the
	// 12th and stime the 13th of them.
	i := bytes.LastIndexByte(b, ')')
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(string(f[11]), 10, 64)
	s, _ := strconv.ParseInt(string(f[12]), 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

// noRedirects follows no redirect: a 3xx is the answer (httplimit's rule;
// process imports nothing of this module).
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// TailFile is the last n lines of a child's log file, for an error that
// says why the child failed (the read error's text where it cannot be
// read).
func TailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
