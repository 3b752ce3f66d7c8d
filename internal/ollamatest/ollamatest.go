package ollamatest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/enginetest"
	"github.com/tokentrace/tokentrace/internal/gguf"
	"github.com/tokentrace/tokentrace/internal/process"
)

// Version is the Ollama release .ci/run installs and the suite was
// measured on.
const Version = "0.17.4"

// errNoOllama is Find's error where there is no ollama binary.
var errNoOllama = errors.New("no ollama binary")

// Find returns the ollama binary's path: TOKENTRACE_OLLAMA, else ollama on
// PATH, else GOPATH's bin (where .ci/run installs it). It skips t where
// there is none.
func Find(t testing.TB) string {
	t.Helper()
	bin, err := find()
	if errors.Is(err, errNoOllama) {
		t.Skipf("Ollama engine: %v; the tests against a real Ollama skip (install it: go install github.com/ollama/ollama@v%s, "+
			"with the headers docs/engines.md lists; .ci/run does)", err, Version)
	}
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func find() (string, error) {
	if bin := os.Getenv("TOKENTRACE_OLLAMA"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("ollama engine: TOKENTRACE_OLLAMA: %w", err)
		}
		return bin, nil
	}
	if bin, err := exec.LookPath("ollama"); err == nil {
		return bin, nil
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("%w on PATH, and no home directory for GOPATH's bin", errNoOllama)
		}
		gopath = filepath.Join(home, "go")
	}
	bin := filepath.Join(filepath.SplitList(gopath)[0], "bin", "ollama")
	if _, err := os.Stat(bin); errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w on PATH or at %s (and TOKENTRACE_OLLAMA unset)", errNoOllama, bin)
	} else if err != nil {
		return "", fmt.Errorf("ollama engine: %w", err)
	}
	return bin, nil
}

// Options are how a test's Ollama runs.
type Options struct {
	// Shape is the model's (enginetest.Model); zero means enginetest.Small.
	Shape gguf.LlamaShape
	// Parallel is OLLAMA_NUM_PARALLEL, the requests the model runs at
	// once; 0 means 4.
	Parallel int
	// Threads is the model's num_thread; 0 means 1.
	Threads int
	// Context is the model's num_ctx, each request's context (Ollama
	// allocates Context × Parallel tokens of KV cache); 0 means 1024.
	Context int
	// KeepAlive is OLLAMA_KEEP_ALIVE, how long an idle model stays
	// loaded; 0 means an hour (the test's life).
	KeepAlive time.Duration
	// Env is more environment for `ollama serve` (KEY=value).
	Env []string
}

// Name is the model's name in Ollama: what requests put in "model".
const Name = "tokentrace-random:latest"

// Server is a running `ollama serve` with the model imported.
type Server struct {
	// URL is http://127.0.0.1:port: the OpenAI API under /v1, Ollama's
	// own under /api.
	URL string
	// Addr is 127.0.0.1:port.
	Addr string
	// Model is the model's name (Name); File its GGUF file, Shape its
	// shape.
	Model, File string
	Shape       gguf.LlamaShape
	// Parallel, Threads, Context and KeepAlive are as the server runs.
	Parallel, Threads, Context int
	KeepAlive                  time.Duration
	// Log is the file the server's output goes to (its runner's too).
	Log string

	bin, home, models string
	env               []string
	proc              *process.Proc
}

// Start runs `ollama serve` for t on a free loopback port, imports the
// model and returns; the server is stopped when the test ends.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	bin := Find(t)
	s, err := newServer(bin, t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	var last error
	for attempt := range 3 { // a free port can be taken between finding and binding it
		s.Log = filepath.Join(s.home, fmt.Sprintf("ollama.%d.log", attempt))
		if last = s.start(); last == nil {
			break
		}
	}
	if last != nil {
		t.Fatalf("ollama serve did not start: %v", last)
	}
	t.Cleanup(s.Stop)
	if err := s.create(); err != nil {
		t.Fatal(err)
	}
	return s
}

// newServer writes the model and the Modelfile into dir.
func newServer(bin, dir string, o Options) (*Server, error) {
	if o.Shape == (gguf.LlamaShape{}) {
		o.Shape = enginetest.Small
	}
	s := &Server{Model: Name, Shape: o.Shape, Parallel: o.Parallel, Threads: o.Threads, Context: o.Context,
		KeepAlive: o.KeepAlive, bin: bin, home: dir, models: filepath.Join(dir, "models"), env: o.Env}
	if s.Parallel <= 0 {
		s.Parallel = 4
	}
	if s.Threads <= 0 {
		s.Threads = 1
	}
	if s.Context <= 0 {
		s.Context = 1024
	}
	if s.KeepAlive <= 0 {
		s.KeepAlive = time.Hour
	}
	var err error
	if s.File, err = enginetest.WriteModel(dir, s.Shape); err != nil {
		return nil, fmt.Errorf("ollama %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Modelfile"), Modelfile(s.File, s.Threads, s.Context), 0o600); err != nil {
		return nil, fmt.Errorf("ollama model: %w", err)
	}
	return s, nil
}

// Modelfile is the Modelfile that imports the GGUF at path with the
// thread count and context every request runs with.
func Modelfile(path string, threads, context int) []byte {
	return fmt.Appendf(nil, "FROM %s\nPARAMETER num_thread %d\nPARAMETER num_ctx %d\n", path, threads, context)
}

// Environ is `ollama serve`'s environment: this process's without any
// OLLAMA_ setting, then the server's own.
func (s *Server) Environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OLLAMA_") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	return append(append(env,
		"HOME="+s.home, // its key pair and history
		"OLLAMA_HOST="+s.Addr,
		"OLLAMA_MODELS="+s.models,
		"OLLAMA_NUM_PARALLEL="+strconv.Itoa(s.Parallel),
		"OLLAMA_KEEP_ALIVE="+s.KeepAlive.String(),
		"OLLAMA_MAX_LOADED_MODELS=1",
	), s.env...)
}

func (s *Server) start() error {
	addr, err := process.FreeAddr()
	if err != nil {
		return err
	}
	s.Addr, s.URL = addr, "http://"+addr
	log, err := os.Create(s.Log)
	if err != nil {
		return err
	}
	defer func() { _ = log.Close() }() // the child holds its own descriptor
	// Its own process group: the model runner it starts ends with it.
	cmd := process.CommandGroup(context.Background(), s.bin, "serve")
	cmd.Env = s.Environ()
	cmd.Stdout, cmd.Stderr = log, log
	if s.proc, err = process.Start("ollama serve", cmd); err != nil {
		return err
	}
	if err := s.proc.WaitReady(context.Background(), s.URL+"/api/version", 60*time.Second); err != nil {
		s.Stop()
		return fmt.Errorf("ollama serve on %s: %w: %s", s.Addr, err, process.TailFile(s.Log, 8))
	}
	return nil
}

// create imports the model: `ollama create` with the Modelfile, against
// this server.
func (s *Server) create() error {
	out, err := s.Command(2*time.Minute, "create", s.Model, "-f", filepath.Join(s.home, "Modelfile"))
	if err != nil {
		return fmt.Errorf("ollama create %s: %w\n%s\nserver log:\n%s", s.Model, err, out, process.TailFile(s.Log, 8))
	}
	return nil
}

// Command runs the ollama command line against this server (OLLAMA_HOST
// set), within d, and returns its output.
func (s *Server) Command(d time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, args...)
	cmd.Env = s.Environ()
	out, err := process.CombinedOutput(cmd)
	return string(out), err
}

// Stop ends the server and its runner (an interrupt to its process group,
// then a kill after 5 s) and waits for it. Stopping a stopped server is a
// no-op.
func (s *Server) Stop() { s.proc.Stop(5 * time.Second) }
