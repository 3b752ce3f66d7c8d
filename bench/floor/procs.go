package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// proc is a proxy running as a process of its own, as it runs in
// production: the harness starts it and stops it.
type proc struct {
	name string
	addr string
	cmd  *exec.Cmd
	log  *bytes.Buffer
}

// cpu is the process's user + system CPU time so far, with its child
// processes' (nginx's worker), 0 where /proc is missing.
func (p *proc) cpu() time.Duration {
	if p == nil || p.cmd.Process == nil {
		return 0
	}
	pid := p.cmd.Process.Pid
	total := procCPU(pid)
	children, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, c := range strings.Fields(string(children)) {
		if n, err := strconv.Atoi(c); err == nil {
			total += procCPU(n)
		}
	}
	return total
}

// procCPU is one process's user + system CPU time.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return 0
	}
	// utime and stime, the 12th and 13th fields after the name, in clock
	// ticks of 10 ms.
	u, _ := strconv.ParseInt(string(f[11]), 10, 64)
	s, _ := strconv.ParseInt(string(f[12]), 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

func (p *proc) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// freePort returns a loopback address no one listens on right now.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitReady polls url until it answers 200 or the deadline passes.
func waitReady(ctx context.Context, p *proc, url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s did not become ready at %s: %s", p.name, url, strings.TrimSpace(p.log.String()))
}

// nginxConf is the nginx the issue names: one worker, proxy_buffering off
// (each upstream read is sent on at once), HTTP/1.1 keep-alive to the
// upstream, no access log, long keep-alive on both sides.
const nginxConf = `worker_processes 1;
daemon off;
master_process on;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
worker_rlimit_nofile 65536;
events { worker_connections 16384; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  keepalive_requests 1000000;
  keepalive_timeout 300s;
  upstream floor {
    server %[2]s;
    keepalive 2048;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
  }
  server {
    listen %[3]s;
    location / {
      proxy_pass http://floor;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
    location = /nginx-ready { return 200; }
  }
}
`

// findNginx is the nginx binary: the flag's, else on PATH, else Debian's
// /usr/sbin/nginx (not on a non-root PATH).
func findNginx(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if p, err := exec.LookPath("nginx"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx", nil
	}
	return "", errors.New("no nginx on PATH or at /usr/sbin/nginx (Debian: apt-get install nginx-light)")
}

func startNginx(ctx context.Context, bin, dir, upstream string) (*proc, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	dir = filepath.Join(dir, "nginx")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, dir, upstream, addr), 0o644); err != nil {
		return nil, err
	}
	p := &proc{name: "nginx", addr: addr, log: &bytes.Buffer{}}
	p.cmd = exec.CommandContext(ctx, bin, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log"))
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("nginx: %w", err)
	}
	if err := waitReady(ctx, p, "http://"+addr+"/nginx-ready"); err != nil {
		p.stop()
		errLog, _ := os.ReadFile(filepath.Join(dir, "error.log"))
		return nil, fmt.Errorf("%w %s", err, bytes.TrimSpace(errLog))
	}
	return p, nil
}

// startGateway runs `tokentrace gateway` in its quick-start form in front
// of the upstream: every stage measured, its metrics served on /metrics;
// env adds to its environment.
func startGateway(ctx context.Context, bin, upstream string, env []string) (*proc, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(addr)
	p := &proc{name: "gateway", addr: addr, log: &bytes.Buffer{}}
	p.cmd = exec.CommandContext(ctx, bin, "gateway", "--upstream", "http://"+upstream, "--host", host, "--port", port)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if err := waitReady(ctx, p, "http://"+addr+"/health"); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// moduleDir is the root of the module the harness runs in (go env GOMOD).
func moduleDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil || len(bytes.TrimSpace(out)) == 0 || string(bytes.TrimSpace(out)) == os.DevNull {
		return "", fmt.Errorf("finding the module (run from the tokentrace source tree, or pass -tokentrace and -serve-streams 0): %v", err)
	}
	return filepath.Dir(string(bytes.TrimSpace(out))), nil
}

// buildTokentrace builds the command into dir with the go tool.
func buildTokentrace(ctx context.Context, dir string) (string, error) {
	module, err := moduleDir(ctx)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "tokentrace")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/tokentrace")
	cmd.Dir = module
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/tokentrace: %w\n%s", err, msg)
	}
	return bin, nil
}
