package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/process"
)

// proc is a proxy running as a process of its own, as it runs in
// production: the harness starts it and stops it (internal/process).
type proc struct {
	*process.Proc
	addr string
	log  *process.Log
}

// cpu is the process's user + system CPU time so far, with its child
// processes' (nginx's worker), 0 where /proc is missing.
func (p *proc) cpu() time.Duration {
	if p == nil {
		return 0
	}
	return p.CPU()
}

// stop interrupts the process, kills it after 5 s, and waits for it.
func (p *proc) stop() {
	if p != nil {
		p.Stop(5 * time.Second)
	}
}

// startProc starts cmd, listening on addr, and waits up to 30 s for ready
// to answer 200; its output is kept in the proc's log.
func startProc(ctx context.Context, name, addr string, cmd *exec.Cmd, ready string) (*proc, error) {
	log := &process.Log{}
	cmd.Stdout, cmd.Stderr = log, log
	pp, err := process.Start(name, cmd)
	if err != nil {
		return nil, err
	}
	p := &proc{Proc: pp, addr: addr, log: log}
	if err := pp.WaitReady(ctx, ready, 30*time.Second); err != nil {
		p.stop()
		return nil, fmt.Errorf("%w: %s", err, strings.TrimSpace(log.String()))
	}
	return p, nil
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
	addr, err := process.FreeAddr()
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
	cmd := process.CommandGroup(ctx, bin, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log")) // its worker ends with it
	p, err := startProc(ctx, "nginx", addr, cmd, "http://"+addr+"/nginx-ready")
	if err != nil {
		errLog, _ := os.ReadFile(filepath.Join(dir, "error.log"))
		return nil, fmt.Errorf("%w %s", err, bytes.TrimSpace(errLog))
	}
	return p, nil
}

// startGateway runs `tokentrace gateway` in its quick-start form in front
// of the upstream: every stage measured, its metrics served on /metrics;
// env adds to its environment.
func startGateway(ctx context.Context, bin, upstream string, env []string) (*proc, error) {
	addr, err := process.FreeAddr()
	if err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(addr)
	cmd := exec.CommandContext(ctx, bin, "gateway", "--upstream", "http://"+upstream, "--host", host, "--port", port)
	cmd.Env = append(os.Environ(), env...)
	p, err := startProc(ctx, "gateway", addr, cmd, "http://"+addr+"/health")
	if err != nil {
		return nil, err
	}
	return p, nil
}

// moduleDir is the root of the module the harness runs in (go env GOMOD).
func moduleDir(ctx context.Context) (string, error) {
	out, err := process.Output(exec.CommandContext(ctx, "go", "env", "GOMOD"))
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
	cmd := process.CommandGroup(ctx, "go", "build", "-o", bin, "./cmd/tokentrace") // its compiler and linker end with it
	cmd.Dir = module
	if msg, err := process.CombinedOutput(cmd); err != nil {
		return "", fmt.Errorf("go build ./cmd/tokentrace: %w\n%s", err, msg)
	}
	return bin, nil
}
