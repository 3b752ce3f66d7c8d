package deploy

import (
	"bufio"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/process"
	"github.com/tokentrace/tokentrace/internal/serve"
)

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// staticBinary builds tokentrace as the Dockerfile's build stage does
// (CGO_ENABLED=0, stripped; without -trimpath, which would recompile every
// package outside the build cache the tests share) once per test run, and
// checks that it is static: no ELF interpreter, no shared library.
func staticBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "tokentrace-deploy-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "tokentrace")
		cmd := exec.Command("go", "build", "-buildvcs=false", "-ldflags=-s -w", "-o", binPath, "../cmd/tokentrace")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := process.CombinedOutput(cmd); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		f, err := elf.Open(binPath)
		if err != nil {
			binErr = err
			return
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				binErr = fmt.Errorf("%s has an ELF interpreter: not static, it cannot run FROM scratch", binPath)
			}
		}
		if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
			binErr = fmt.Errorf("%s needs shared libraries %v: it cannot run FROM scratch", binPath, libs)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// slowServe runs tokentrace serve in process with every engine step taking
// 10 ms, so a 200-token answer streams for about 2 s.
func slowServe(t *testing.T) string {
	t.Helper()
	s, err := serve.Start(context.Background(), serve.Config{Engine: engine.Config{
		Model: simModel, StepTimer: engine.StepTimerFunc(func(*perfmodel.Batch) time.Duration { return 10 * time.Millisecond }),
		BlockSize: 16, NumBlocks: 1024, MaxModelLen: 4096, MaxNumSeqs: 16, Seed: 1,
	}}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return strings.TrimSuffix(s.URL(), "/v1")
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// manifestGatewayArgs returns the Deployment's gateway arguments with
// --addr and --config pointed at this machine: the ConfigMap's
// configuration, its replicas replaced by upstream.
func manifestGatewayArgs(t *testing.T, addr, upstream string) []string {
	t.Helper()
	m := readManifests(t, gatewayManifest)
	_, c := gatewayDeployment(t, m)
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(m.configMaps[0].Data["gateway.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	for _, p := range cfg["pools"].([]any) {
		p.(map[string]any)["replicas"] = []any{map[string]any{"url": upstream, "kind": "tokentrace"}}
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{}
	for _, a := range c.Args {
		switch {
		case strings.HasPrefix(a, "--addr="):
			a = "--addr=" + addr
		case strings.HasPrefix(a, "--config="):
			a = "--config=" + path
		}
		args = append(args, a)
	}
	return args
}

func healthCode(base string) int {
	resp, err := http.Get(base + "/health")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func waitHealth(t *testing.T, base string, code int, exited <-chan error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for healthCode(base) != code {
		select {
		case err := <-exited:
			t.Fatalf("the gateway exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/health never answered %d", base, code)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// openLongStream starts a 200-token stream and reads it to its first
// content token; the rest is read by the returned function.
func openLongStream(t *testing.T, base string) (rest func() string) {
	t.Helper()
	body := `{"model":"` + simModel + `","stream":true,"max_tokens":200,"ignore_eos":true,"messages":[{"role":"user","content":"Hi"}]}`
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	rd := bufio.NewReader(resp.Body)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended before its first token: %v", err)
		}
		if strings.Contains(line, `"content":"`) && !strings.Contains(line, `"content":""`) {
			break
		}
	}
	return func() string {
		defer resp.Body.Close()
		b, _ := io.ReadAll(rd)
		return string(b)
	}
}

// TestGatewayBinaryDrainsOnSIGTERM runs the built binary with the
// Kubernetes Deployment's arguments (--drain-delay, --grace), sends it
// SIGTERM in the middle of a stream, and checks what the kubelet relies
// on: /health turns 503 at once, the stream in flight runs to [DONE], the
// port closes, and the process exits 0.
func TestGatewayBinaryDrainsOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := staticBinary(t)
	addr := freeAddr(t)
	base := "http://" + addr
	cmd := exec.Command(bin, manifestGatewayArgs(t, addr, slowServe(t))...)
	logs, exited := startLogged(t, cmd, "gateway", func() { _ = cmd.Process.Kill() })
	waitHealth(t, base, 200, exited)
	rest := openLongStream(t, base)

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, base, 503, exited) // draining, still accepting during --drain-delay
	if tail := rest(); !strings.Contains(tail, "[DONE]") {
		t.Errorf("the stream in flight at SIGTERM did not finish: ...%s", tail[max(0, len(tail)-200):])
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after a clean drain: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the gateway did not exit after SIGTERM")
	}
	if healthCode(base) != 0 {
		t.Error("the port still answers after exit")
	}
	if !strings.Contains(logs.String(), "every request in flight finished") {
		t.Errorf("the log does not say the drain finished:\n%s", logs.String())
	}
}

// containerTool returns podman (or buildah, for the build alone) when one
// is installed.
func containerTool(t *testing.T) (podman, buildah string) {
	t.Helper()
	podman, _ = exec.LookPath("podman")
	buildah, _ = exec.LookPath("buildah")
	if podman == "" && buildah == "" {
		t.Skip("neither podman nor buildah is on PATH (Debian: apt-get install podman runc; .ci/run installs them): the image is not built here")
	}
	return podman, buildah
}

// TestContainerImage builds the Dockerfile's prebuilt target (FROM
// scratch: nothing to pull) around the static binary, checks the image's
// user and entry point, and runs it once as the gateway in front of serve:
// it answers /health and a streamed completion, then drains and exits 0
// on the SIGTERM that podman passes on.
func TestContainerImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and an image")
	}
	podman, buildah := containerTool(t)
	bin := staticBinary(t)
	ctxDir := t.TempDir()
	copyFile(t, bin, filepath.Join(ctxDir, "tokentrace"), 0o755)
	copyFile(t, "/etc/ssl/certs/ca-certificates.crt", filepath.Join(ctxDir, "ca-certificates.crt"), 0o644)
	df, err := filepath.Abs(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("localhost/tokentrace-deploy-test:%d", os.Getpid())
	builder := podman
	buildArgs := []string{"build"}
	if builder == "" {
		builder, buildArgs = buildah, []string{"bud"}
	}
	run(t, 5*time.Minute, builder, append(buildArgs, "--target", "prebuilt", "-f", df, "-t", tag, ctxDir)...)
	t.Cleanup(func() { _ = process.Run(exec.Command(builder, "rmi", "-f", tag)) })

	var info []struct {
		Config struct {
			User       string
			Entrypoint []string
			Cmd        []string
		}
	}
	if err := json.Unmarshal([]byte(run(t, time.Minute, builder, "inspect", "--type", "image", tag)), &info); err != nil || len(info) != 1 {
		t.Fatalf("inspect: %v", err)
	}
	if c := info[0].Config; c.User != "65532:65532" || strings.Join(c.Entrypoint, " ") != "/tokentrace" || len(c.Cmd) == 0 || c.Cmd[0] != "gateway" {
		t.Errorf("image config %+v: want user 65532:65532, entry point /tokentrace, gateway by default", c)
	}
	if podman == "" {
		t.Skip("built with buildah; podman is not installed, so the image is not run")
	}
	runContainer(t, podman, tag)
}

// runContainer runs the image as the gateway on the host's network in
// front of an in-process serve, checks it serves, and stops it with
// SIGTERM. podman's OCI runtime is runc when installed: crun refuses
// hybrid cgroup hierarchies (cgroup v1 with a v2 mount beside it), runc
// does not. The container's open-file and process limits are set at or
// below common hard limits, because raising a limit needs CAP_SYS_RESOURCE,
// which a sandboxed root may lack.
func runContainer(t *testing.T, podman, tag string) {
	t.Helper()
	upstream := slowServe(t)
	addr := freeAddr(t)
	base := "http://" + addr
	name := fmt.Sprintf("tokentrace-deploy-test-%d", os.Getpid())
	args := []string{}
	if _, err := exec.LookPath("runc"); err == nil {
		args = append(args, "--runtime", "runc")
	}
	args = append(args, "run", "--rm", "--name", name, "--network", "host",
		"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
		tag, "gateway", "--addr="+addr, "--upstream="+upstream, "--grace=20s")
	cmd := exec.Command(podman, args...)
	logs, exited := startLogged(t, cmd, "podman run", func() { _ = process.Run(exec.Command(podman, "rm", "-f", name)) })
	deadline := time.Now().Add(2 * time.Minute)
	for healthCode(base) != 200 {
		select {
		case err := <-exited:
			if strings.Contains(logs.String(), "OCI") {
				t.Skipf("the image was built, but this machine's container runtime cannot run it (%v):\n%s", err, logs.String())
			}
			t.Fatalf("the container exited: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the container's gateway never answered /health")
		}
		time.Sleep(100 * time.Millisecond)
	}
	rest := openLongStream(t, base)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil { // podman passes it on
		t.Fatal(err)
	}
	if tail := rest(); !strings.Contains(tail, "[DONE]") {
		t.Errorf("the stream in flight at SIGTERM did not finish")
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the container's exit after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the container did not exit after SIGTERM")
	}
}

// startLogged starts cmd with its output captured, and returns the output
// and the channel its exit arrives on; at cleanup, stop runs and the
// output is logged if the test failed.
func startLogged(t *testing.T, cmd *exec.Cmd, what string, stop func()) (*lockedBuffer, <-chan error) {
	t.Helper()
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := process.StartCmd(cmd); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("%s output:\n%s", what, logs.String())
		}
	})
	return logs, exited
}

func run(t *testing.T, limit time.Duration, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	out, err := process.CombinedOutput(process.CommandGroup(ctx, name, args...))
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}
