package llamacpptest

import (
	"bufio"
	"context"
	"errors"
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

// Shape is a llama-architecture model's size, as make_model.py takes it.
type Shape struct {
	Layers, Hidden, Heads, KVHeads, FFN int
}

// Small is the model tests use: 2 layers, 256 wide, 4 heads (2 KV heads,
// head dimension 64), FFN 512 — about 17 M parameters, most of them the
// 32,000-token embedding and output matrices (34 MB in f16).
var Small = Shape{Layers: 2, Hidden: 256, Heads: 4, KVHeads: 2, FFN: 512}

// Reference is the shared README's measured model: 10 layers, 640 wide,
// 10 heads (2 KV heads), FFN 1280 — 75.4 M parameters, 152 MB in f16.
var Reference = Shape{Layers: 10, Hidden: 640, Heads: 10, KVHeads: 2, FFN: 1280}

// Vocab is the size of the vocabulary make_model.py gives every model
// (llama.cpp's models/ggml-vocab-llama-spm.gguf).
const Vocab = 32000

// Params is the model's parameter count, as make_model.py counts it.
func (s Shape) Params() int {
	hd := s.Hidden / s.Heads
	return 2*Vocab*s.Hidden + s.Layers*(2*s.Hidden+s.Hidden*s.Heads*hd+2*s.Hidden*s.KVHeads*hd+s.Heads*hd*s.Hidden+3*s.Hidden*s.FFN) + s.Hidden
}

// ConfigJSON is the model's Hugging Face config.json, as tokentrace's
// performance model reads one (calibrate, simulate and estimate --model):
// a llama architecture with make_model.py's f16 weights and vocabulary,
// and ctx positions.
func (s Shape) ConfigJSON(ctx int) []byte {
	return fmt.Appendf(nil, `{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":%d,`+
		`"num_hidden_layers":%d,"num_attention_heads":%d,"num_key_value_heads":%d,"intermediate_size":%d,`+
		`"vocab_size":%d,"max_position_embeddings":%d,"torch_dtype":"float16"}`,
		s.Hidden, s.Layers, s.Heads, s.KVHeads, s.FFN, Vocab, ctx)
}

func (s Shape) String() string {
	return fmt.Sprintf("L%d-H%d-NH%d-NKV%d-FF%d", s.Layers, s.Hidden, s.Heads, s.KVHeads, s.FFN)
}

// Engine is a built llama-server and the source tree it came from.
type Engine struct {
	// Binary is llama-server's path.
	Binary string
	// Source is the extracted llama.cpp source (gguf-py, models/); "" when
	// Binary came from TOKENTRACE_LLAMA_SERVER.
	Source string
	// Cache is where models are kept.
	Cache string
	// Dir is shared/engines/llama.cpp (build.sh, make_model.py).
	Dir string
}

// sharedDir finds shared/engines/llama.cpp in the working directory or an
// ancestor of it ("" when there is none).
func sharedDir() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		d := filepath.Join(dir, "shared", "engines", "llama.cpp")
		if _, err := os.Stat(filepath.Join(d, "build.sh")); err == nil {
			return d
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// cacheDir is build.sh's default cache: $XDG_CACHE_HOME or ~/.cache, then
// tokentrace-engines.
func cacheDir() (string, error) {
	if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
		return filepath.Join(x, "tokentrace-engines"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".cache", "tokentrace-engines"), nil
}

// buildVersion reads the pinned commit from build.sh's version= line.
func buildVersion(buildSh string) (string, error) {
	b, err := os.ReadFile(buildSh)
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "version="); ok && v != "" {
			return strings.Trim(v, `"'`), nil
		}
	}
	return "", fmt.Errorf("%s has no version= line", buildSh)
}

// Find locates llama-server: TOKENTRACE_LLAMA_SERVER, else the binary
// build.sh keeps in its cache (build.sh prints it at once when built). It
// skips t where there is no shared folder and fails t, naming the build
// command, where the folder is present but the engine is not built.
func Find(t testing.TB) Engine {
	t.Helper()
	e, err := find()
	if errors.Is(err, errNoShared) {
		t.Skip("llama.cpp engine: no shared/engines/llama.cpp beside or above this checkout (and TOKENTRACE_LLAMA_SERVER unset); the tests against a real llama-server skip")
	}
	if errors.Is(err, errBuilding) {
		// Only where someone started the build by hand; .ci/run builds it
		// before the tests.
		t.Skipf("%v; the tests against it skip until it is done", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return e
}

var (
	errNoShared = errors.New("no shared/engines/llama.cpp")
	errBuilding = errors.New("llama.cpp engine: llama-server is being built right now")
)

// buildQuiet is how long a build's log may go unwritten before the build
// counts as stopped (failed or killed) rather than under way: compiling
// one file on a busy machine takes a minute or two.
const buildQuiet = 5 * time.Minute

func find() (Engine, error) {
	cache, err := cacheDir()
	if err != nil {
		return Engine{}, fmt.Errorf("llama.cpp engine: no cache directory: %w", err)
	}
	if bin := os.Getenv("TOKENTRACE_LLAMA_SERVER"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return Engine{}, fmt.Errorf("llama.cpp engine: TOKENTRACE_LLAMA_SERVER: %w", err)
		}
		return Engine{Binary: bin, Cache: cache, Dir: sharedDir()}, nil
	}
	dir := sharedDir()
	if dir == "" {
		return Engine{}, errNoShared
	}
	buildSh := filepath.Join(dir, "build.sh")
	version, err := buildVersion(buildSh)
	if err != nil {
		return Engine{}, fmt.Errorf("llama.cpp engine: %w", err)
	}
	source := filepath.Join(cache, "llama.cpp-"+version)
	bin := filepath.Join(source, "build", "bin", "llama-server")
	if _, err := os.Stat(bin); err != nil {
		// build.sh would start a build here: ten minutes that do not fit in
		// a test, and a second build would delete one in progress.
		if fi, err := os.Stat(filepath.Join(source, "build.log")); err == nil && time.Since(fi.ModTime()) < buildQuiet {
			return Engine{}, fmt.Errorf("%w: its build.log was written %s ago", errBuilding, time.Since(fi.ModTime()).Round(time.Second))
		}
		return Engine{}, fmt.Errorf("llama.cpp engine: llama-server is not built (%s is missing): run `bash %s` once (about 10 minutes on 2 cores; .ci/run does it before the tests)", bin, buildSh)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := process.Output(process.CommandGroup(ctx, "bash", buildSh, cache)) // its cmake and compilers end with it
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return Engine{}, fmt.Errorf("llama.cpp engine: bash %s: %w\n%s", buildSh, err, ee.Stderr)
		}
		return Engine{}, fmt.Errorf("llama.cpp engine: bash %s: %w", buildSh, err)
	}
	if got := strings.TrimSpace(string(out)); got != bin {
		return Engine{}, fmt.Errorf("llama.cpp engine: build.sh printed %q, want %q", got, bin)
	}
	return Engine{Binary: bin, Source: source, Cache: cache, Dir: dir}, nil
}

// Model is the path of a random-weight model of the shape, written once
// into the cache by make_model.py (with /usr/bin/python3 and Debian's
// python3-numpy) and reused after.
func (e Engine) Model(t testing.TB, s Shape) string {
	t.Helper()
	path, err := e.model(s)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func (e Engine) model(s Shape) (string, error) {
	if s.Heads <= 0 || s.Hidden%s.Heads != 0 || s.KVHeads <= 0 || s.Heads%s.KVHeads != 0 || s.Layers <= 0 || s.FFN <= 0 {
		return "", fmt.Errorf("llama.cpp model: shape %s: hidden must divide into heads and heads into KV heads", s)
	}
	path := filepath.Join(e.Cache, "models", "random-llama-"+s.String()+".gguf")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if e.Source == "" || e.Dir == "" {
		return "", fmt.Errorf("llama.cpp model: %s is missing and there is no llama.cpp source and shared folder to make it with", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("llama.cpp model: %w", err)
	}
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		python = "python3"
	}
	// Written beside its final name and renamed: concurrent test binaries
	// never read a half-written model.
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	defer func() { _ = os.Remove(tmp) }() // gone already once renamed
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, filepath.Join(e.Dir, "make_model.py"), tmp,
		filepath.Join(e.Source, "models", "ggml-vocab-llama-spm.gguf"),
		strconv.Itoa(s.Layers), strconv.Itoa(s.Hidden), strconv.Itoa(s.Heads), strconv.Itoa(s.KVHeads), strconv.Itoa(s.FFN))
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(e.Source, "gguf-py"))
	if out, err := process.CombinedOutput(cmd); err != nil {
		hint := ""
		if strings.Contains(string(out), "No module named 'numpy'") {
			hint = " (Debian: apt-get install python3-numpy; .ci/run installs it)"
		}
		return "", fmt.Errorf("llama.cpp model: make_model.py%s: %w\n%s", hint, err, out)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("llama.cpp model: %w", err)
	}
	return path, nil
}

// Options are how a test's llama-server runs.
type Options struct {
	// Shape is the model's; zero means Small.
	Shape Shape
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
	Shape Shape
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
	e := Find(t)
	if o.Shape == (Shape{}) {
		o.Shape = Small
	}
	if o.Slots <= 0 {
		o.Slots = 4
	}
	if o.Context <= 0 {
		o.Context = 1024 * o.Slots
	}
	model := e.Model(t, o.Shape)
	dir := t.TempDir()
	var last error
	for attempt := range 3 { // a free port can be taken between finding and binding it
		s := &Server{Model: model, Shape: o.Shape, Slots: o.Slots, Context: o.Context,
			Log: filepath.Join(dir, fmt.Sprintf("llama-server.%d.log", attempt))}
		if last = s.start(e.Binary, o); last == nil {
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
	// A random-weight model emits byte tokens (ids 3–258 in this
	// vocabulary) whose bytes are not UTF-8, which fails llama.cpp's chat
	// parser mid-stream: ban them.
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
		return fmt.Errorf("llama-server on %s: %w: %s", s.Addr, err, tail(s.Log))
	}
	return nil
}

// Stop ends the server (an interrupt, then a kill after 5 s) and waits for
// it. Stopping a stopped server is a no-op.
func (s *Server) Stop() { s.proc.Stop(5 * time.Second) }

// tail is the last lines of a log file, for errors.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return strings.Join(lines, "\n")
}
