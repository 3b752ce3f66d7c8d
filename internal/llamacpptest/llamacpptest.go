package llamacpptest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/enginetest"
	"github.com/tokentrace/tokentrace/internal/gguf"
	"github.com/tokentrace/tokentrace/internal/process"
)

// Small is the model tests use (enginetest's): 2 layers, 256 wide, 4
// heads (2 KV heads, head dimension 64), FFN 512.
var Small = enginetest.Small

// errNoServer is find's error where LLAMA_SERVER is unset.
var errNoServer = errors.New("llama.cpp engine: LLAMA_SERVER is unset")

// Find returns the llama-server binary LLAMA_SERVER names: llama.cpp is
// not installed from a registry, so the tests against it run only where
// a user built it and says where. It skips t where LLAMA_SERVER is unset
// and fails it where the path is wrong.
func Find(t testing.TB) string {
	t.Helper()
	bin, err := find()
	if errors.Is(err, errNoServer) {
		t.Skip("llama.cpp engine: LLAMA_SERVER is unset; the tests against a real llama-server run when it names a " +
			"llama-server binary you built (with the project's own random-weight model; the Ollama suite, " +
			"internal/ollamatest, is the real engine in CI)")
	}
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func find() (string, error) {
	bin := os.Getenv("LLAMA_SERVER")
	if bin == "" {
		return "", errNoServer
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("llama.cpp engine: LLAMA_SERVER: %w", err)
	}
	return bin, nil
}

// Options are how a test's llama-server runs.
type Options struct {
	// Shape is the model's (enginetest.Model); zero means Small.
	Shape gguf.LlamaShape
	// Slots is -np, the requests decoded together; 0 means 4.
	Slots int
	// Context is -c, the KV cache's tokens over all slots (each slot gets
	// Context/Slots); 0 means 1024 per slot.
	Context int
	// Args are more llama-server arguments.
	Args []string
}

// Server is a running llama-server.
type Server struct {
	// URL is http://127.0.0.1:port, the OpenAI API under /v1.
	URL string
	// Addr is 127.0.0.1:port.
	Addr string
	// Model is the model file's path; Shape its shape.
	Model string
	Shape gguf.LlamaShape
	// Slots and Context are -np and -c.
	Slots, Context int
	// Log is the file the server's output goes to.
	Log string

	proc *process.Proc
}

// Start runs llama-server for t on a free loopback port and returns once
// /health answers 200; the server is stopped when the test ends.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	bin := Find(t)
	if o.Shape == (gguf.LlamaShape{}) {
		o.Shape = Small
	}
	if o.Slots <= 0 {
		o.Slots = 4
	}
	if o.Context <= 0 {
		o.Context = 1024 * o.Slots
	}
	dir := t.TempDir()
	model, err := enginetest.WriteModel(dir, o.Shape)
	if err != nil {
		t.Fatal(err)
	}
	var last error
	for attempt := range 3 { // a free port can be taken between finding and binding it
		s := &Server{Model: model, Shape: o.Shape, Slots: o.Slots, Context: o.Context,
			Log: filepath.Join(dir, fmt.Sprintf("llama-server.%d.log", attempt))}
		if last = s.start(bin, o); last == nil {
			t.Cleanup(s.Stop)
			return s
		}
	}
	t.Fatalf("llama-server did not start: %v", last)
	return nil
}

// Args are the arguments the server runs with, beside --port.
func Args(model string, o Options) []string {
	args := []string{"-m", model, "--host", "127.0.0.1",
		"-np", strconv.Itoa(o.Slots), "-c", strconv.Itoa(o.Context),
		"--metrics", "-t", "1", "--no-webui"}
	// A random-weight model may emit byte tokens (ids 3–258 in this
	// vocabulary) whose bytes are not UTF-8, which fails llama.cpp's chat
	// parser mid-stream: ban them (the project's model never samples
	// them; a model of another vocabulary is banned from the same ids).
	for id := 3; id <= 258; id++ {
		args = append(args, "-l", strconv.Itoa(id)+"-inf")
	}
	return append(args, o.Args...)
}

func (s *Server) start(bin string, o Options) error {
	addr, err := process.FreeAddr()
	if err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(addr)
	s.Addr = addr
	s.URL = "http://" + s.Addr
	log, err := os.Create(s.Log)
	if err != nil {
		return err
	}
	defer func() { _ = log.Close() }() // the child holds its own descriptor
	cmd := exec.Command(bin, append(Args(s.Model, o), "--port", port)...)
	cmd.Stdout, cmd.Stderr = log, log
	if s.proc, err = process.Start("llama-server", cmd); err != nil {
		return err
	}
	// Loading and warming up a small model takes a second or two; a busy
	// machine may take far longer.
	if err := s.proc.WaitReady(context.Background(), s.URL+"/health", 90*time.Second); err != nil {
		s.Stop()
		return fmt.Errorf("llama-server on %s: %w: %s", s.Addr, err, process.TailFile(s.Log, 8))
	}
	return nil
}

// Stop ends the server (an interrupt, then a kill after 5 s) and waits for
// it. Stopping a stopped server is a no-op.
func (s *Server) Stop() { s.proc.Stop(5 * time.Second) }
