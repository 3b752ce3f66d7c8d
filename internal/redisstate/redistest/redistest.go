// Package redistest runs a real redis-server (Debian's redis-server
// package) on a loopback port for tests, with no persistence, in a
// temporary directory; a test that needs one is skipped, saying why, when
// the binary is absent.
//
// It imports nothing of this module but internal/process (its start and
// its death with the test binary).
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/process"
)

// Server is a running redis-server.
type Server struct {
	// Addr is host:port on 127.0.0.1.
	Addr string
	// Password is what the server requires (AUTH), "" for none.
	Password string

	t    testing.TB
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs a redis-server for t; it is killed when the test ends.
func Start(t testing.TB) *Server { return StartWithPassword(t, "") }

// StartWithPassword is Start with requirepass set.
func StartWithPassword(t testing.TB, password string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed (Debian: apt-get install redis-server); .ci/run installs it")
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir(), Password: password}
	var last error
	for range 3 { // a free port can be taken between finding and binding it
		if last = s.start(freePort(t)); last == nil {
			t.Cleanup(s.Kill)
			return s
		}
	}
	t.Fatalf("redis-server did not start: %v", last)
	return nil
}

// URL is the server's redis:// URL, with the password when there is one.
func (s *Server) URL() string {
	if s.Password != "" {
		return "redis://:" + s.Password + "@" + s.Addr + "/0"
	}
	return "redis://" + s.Addr + "/0"
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (s *Server) start(port int) error {
	s.port = port
	s.Addr = "127.0.0.1:" + strconv.Itoa(port)
	args := []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis.log"), "--daemonize", "no"}
	if s.Password != "" {
		args = append(args, "--requirepass", s.Password)
	}
	s.cmd = exec.Command(s.bin, args...)
	if err := process.StartCmd(s.cmd); err != nil {
		return err
	}
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(s.cmd, s.done)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server exited: %s", lastLine(string(log)))
		default:
		}
		if s.ping() == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Kill()
	return fmt.Errorf("redis-server on %s did not answer PING within 20s", s.Addr)
}

// ping sends PING and reads PONG.
func (s *Server) ping() error {
	line, err := s.Command("PING")
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// Command sends one inline command (after AUTH when there is a password),
// e.g. "SET k v", and returns the first line of its reply ("+OK",
// "-WRONGTYPE …"): for tests that put a key in a given state.
func (s *Server) Command(line string) (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	r := bufio.NewReader(c)
	if s.Password != "" {
		fmt.Fprintf(c, "AUTH %s\r\n", s.Password)
		if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
			return "", fmt.Errorf("AUTH: %q %v", line, err)
		}
	}
	if _, err := fmt.Fprintf(c, "%s\r\n", line); err != nil {
		return "", err
	}
	reply, err := r.ReadString('\n')
	return strings.TrimRight(reply, "\r\n"), err
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// Kill ends the server at once (SIGKILL) and waits for it: what a crash
// looks like to clients. Killing a stopped server is a no-op.
func (s *Server) Kill() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = cont(s.cmd.Process) // a paused server dies as well
	_ = s.cmd.Process.Kill()
	<-s.done
}

// Restart starts a killed server again on the same port, empty.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.start(s.port); err != nil {
		s.t.Fatalf("restart redis-server: %v", err)
	}
}

// Pause stops the server's process (SIGSTOP): connections stay open and
// nothing answers, as with a stalled server. Resume continues it.
func (s *Server) Pause() { _ = stop(s.cmd.Process) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { _ = cont(s.cmd.Process) }
