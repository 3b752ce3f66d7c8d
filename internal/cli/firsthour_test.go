package cli

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/serve"
)

// exitCode is err's exit status as Main would return it.
func exitCode(err error) int {
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	if err != nil {
		return ExitFailed
	}
	return ExitOK
}

// A --model the server does not list is refused before any request, with
// the name it serves as the suggestion.
func TestBenchModelNotServedSuggests(t *testing.T) {
	url := serveWith(t, nil) + "/v1"
	dir := filepath.Join(t.TempDir(), "run")
	out, err := run(t, "bench", "--url", url, "--model", "llama-3.1-8b", "--requests", "5", "--no-calibration", "--output-dir", dir)
	if exitCode(err) != ExitUsage || !strings.Contains(err.Error(), `did you mean --model "Llama-3.1-8B"?`) {
		t.Fatalf("err %v (exit %d), want exit 2 suggesting the served name\n%s", err, exitCode(err), out)
	}
	if _, err := os.Stat(filepath.Join(dir, "requests.jsonl")); err == nil {
		t.Error("requests were sent for a model the server does not serve")
	}
}

// A single-model server that answers any name (llama.cpp's does) is
// benchmarked under the name given, with a warning naming what it lists.
func TestBenchModelNotListedButAnswered(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/models") {
			_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"model-10x640.gguf","object":"model"}]}`))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n" +
			"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\n" +
			"data: [DONE]\n\n"))
	}))
	defer srv.Close()
	out, err := run(t, "bench", "--url", srv.URL, "--model", "m", "--requests", "3", "--output-tokens", "1", "--no-calibration",
		"--prompt-tokenizer", "builtin", "--scrape-interval", "-1s", "--output-dir", filepath.Join(t.TempDir(), "run"))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, `warning: --model "m" is not among the models`) || !strings.Contains(out, `"model-10x640.gguf"`) {
		t.Errorf("no warning naming the listed model:\n%s", out)
	}
}

// A server that fails every request: its reason is on the console and in
// the error, and the exit status is 1.
func TestBenchEveryRequestFailedSaysWhy(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/models") {
			http.NotFound(w, r) // lists nothing: --model is not judged
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":{"message":"The model ` + "`llama-3.1-8b`" + ` does not exist.","type":"invalid_request_error"}}`))
	}))
	defer srv.Close()
	dir := filepath.Join(t.TempDir(), "run")
	out, err := run(t, "bench", "--url", srv.URL, "--model", "llama-3.1-8b", "--requests", "5", "--rate", "50",
		"--no-calibration", "--prompt-tokenizer", "builtin", "--scrape-interval", "-1s", "--output-dir", dir)
	if exitCode(err) != ExitFailed || !strings.Contains(err.Error(), "every request failed (5)") ||
		!strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("err %v (exit %d), want exit 1 naming the reason\n%s", err, exitCode(err), out)
	}
	if !strings.Contains(out, "5× http_4xx: 404 Not Found: invalid_request_error: The model `llama-3.1-8b` does not exist.") {
		t.Errorf("the console does not quote the reason:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "summary.json")); err != nil {
		t.Error("no summary.json after a run whose requests all failed")
	}
	rep, err := run(t, "report", dir)
	if err != nil || !strings.Contains(rep, "does not exist") {
		t.Errorf("report of the run does not quote the reason (%v):\n%s", err, rep)
	}
}

// --url mistakes name their fix.
func TestBenchURLMistakesNameTheFix(t *testing.T) {
	for _, tt := range []struct{ url, want string }{
		{"http://127.0.0.1:18601/v1/chat/completions", "give http://127.0.0.1:18601/v1 "},
		{"http://h:8000/v1/completions", "give http://h:8000/v1 "},
		{"127.0.0.1:18601", "add http:// (http://127.0.0.1:18601)"},
		{"localhost:8000", "add http:// (http://localhost:8000)"},
	} {
		_, err := run(t, "bench", "--url", tt.url, "--output-dir", filepath.Join(t.TempDir(), "x"))
		if exitCode(err) != ExitUsage || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("--url %s: err %v, want exit 2 saying %q", tt.url, err, tt.want)
		}
	}
}

// A misspelled flag gets the one meant.
func TestUnknownFlagSuggests(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--concurency", "4"}, "did you mean --concurrency?"},
		{[]string{"estimate", "--modle", "x"}, "did you mean --model?"},
		{[]string{"bench", "--zzzz"}, "tokentrace bench --help lists the flags"},
	} {
		_, err := run(t, tt.args...)
		if exitCode(err) != ExitUsage || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err %v, want exit 2 saying %q", tt.args, err, tt.want)
		}
	}
}

// The first signal is acknowledged on stderr at once and stops the
// commands' context.
func TestStopOnSignalAcknowledges(t *testing.T) {
	sigs := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(context.Background())
	var stderr bytes.Buffer
	done := make(chan struct{})
	go func() { stopOnSignal(sigs, cancel, &stderr); close(done) }()
	sigs <- syscall.SIGINT
	<-done
	if ctx.Err() == nil {
		t.Error("the signal did not stop the context")
	}
	if !strings.Contains(stderr.String(), "interrupt: stopping") {
		t.Errorf("stderr %q does not acknowledge the signal", stderr.String())
	}
}

// A bench stopped part-way says so first, writes its results and exits 130.
func TestBenchInterruptedExitStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the embedded engine")
	}
	dir := filepath.Join(t.TempDir(), "run")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := NewRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"bench", "--rate", "20", "--duration", "10m", "--output-tokens", "4", "--no-calibration", "--output-dir", dir})
	go func() {
		// stop once some requests have finished
		for {
			if b, err := os.ReadFile(filepath.Join(dir, "requests.jsonl")); err == nil && bytes.Count(b, []byte("\n")) >= 3 {
				cancel()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	err := root.ExecuteContext(ctx)
	if exitCode(err) != ExitInterrupted {
		t.Fatalf("err %v (exit %d), want %d\n%s", err, exitCode(err), ExitInterrupted, out.String())
	}
	i := strings.Index(out.String(), "INTERRUPTED")
	if i < 0 || i > strings.Index(out.String(), "tokentrace report") {
		t.Errorf("the console does not open its summary with the interruption:\n%s", out.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "summary.json")); err != nil {
		t.Error("no summary.json after an interrupted run")
	}
}

// A second run of the same --seed against a server with prefix caching
// is told its cache was warm; a run of its own seed is not.
func TestBenchWarmCacheWarned(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a server")
	}
	url := serveWith(t, func(o *serve.Options) { o.Engine.EnablePrefixCaching = true }) + "/v1"
	dir := t.TempDir()
	bench := func(name, seed string) string {
		out, err := run(t, "bench", "--url", url, "--seed", seed, "--requests", "20", "--rate", "50", "--output-tokens", "4",
			"--no-calibration", "--output-dir", filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		return out
	}
	if out := bench("first", "7"); strings.Contains(out, "Prefix cache warm") {
		t.Errorf("the first run on a fresh server was warned of a warm cache:\n%s", out)
	}
	if out := bench("again", "7"); !strings.Contains(out, "[warning] Prefix cache warm from before the run") {
		t.Errorf("the same prompts again were not warned of:\n%s", out)
	}
	if out := bench("fresh", "8"); strings.Contains(out, "Prefix cache warm") {
		t.Errorf("a run of its own seed was warned of a warm cache:\n%s", out)
	}
}

// Without --seed bench draws one and says so; a --seed given is kept.
func TestBenchDrawsASeed(t *testing.T) {
	for _, given := range []bool{false, true} {
		cmd := newBenchCmd()
		var stderr bytes.Buffer
		cmd.SetErr(&stderr)
		args := []string{"--requests", "1"}
		if given {
			args = append(args, "--seed", "5")
		}
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		g := newFlagGroup(cmd.Flags(), "", "")
		g.fields = map[string]string{"seed": "seed"}
		if err := drawSeed(cmd, g, 4242); err != nil {
			t.Fatal(err)
		}
		want, said := "4242", "--seed 4242 drawn"
		if given {
			want, said = "5", ""
		}
		if got := cmd.Flags().Lookup("seed").Value.String(); got != want {
			t.Errorf("given %v: --seed %s, want %s", given, got, want)
		}
		if !strings.Contains(stderr.String(), said) {
			t.Errorf("given %v: stderr %q lacks %q", given, stderr.String(), said)
		}
	}
}

// The gateway's first line says where clients go: its /v1 base URL,
// localhost for every interface.
func TestGatewayClientURL(t *testing.T) {
	for _, tt := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, "http://127.0.0.1:8080/v1"},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}, "http://localhost:8080/v1"},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 9}, "http://localhost:9/v1"},
	} {
		if got := clientURL(tt.addr); got != tt.want {
			t.Errorf("%v: %q, want %q", tt.addr, got, tt.want)
		}
	}
}

// A profile carries its model, GPU and engine: estimate, serve's
// configuration and simulate take them without the flags repeated.
func TestProfileCarriesItsSettings(t *testing.T) {
	dir := t.TempDir()
	qwen := writeProfile(t, dir, "Qwen2.5-7B")
	prof, err := perfmodel.LoadProfile(qwen)
	if err != nil {
		t.Fatal(err)
	}
	prof.Engine = "llamacpp"
	if err := prof.WriteFile(qwen); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "estimate", "--profile", qwen)
	if err != nil || !strings.Contains(out, "Qwen2.5-7B") {
		t.Fatalf("estimate --profile: %v\n%s", err, out)
	}
	cmd := &cobra.Command{Use: "x"}
	g := newFlagGroup(cmd.Flags(), "", "")
	o := serve.DefaultOptions()
	bindEngineFlags(g, &o.Engine)
	if err := cmd.ParseFlags([]string{"--profile", qwen}); err != nil {
		t.Fatal(err)
	}
	if err := g.finish(); err != nil {
		t.Fatal(err)
	}
	if o.Engine.Model != "Qwen2.5-7B" || o.Engine.GPU != "H100-SXM" || o.Engine.Engine != "llamacpp" {
		t.Errorf("--profile alone gave model %q, GPU %q, engine %q; want the profile's", o.Engine.Model, o.Engine.GPU, o.Engine.Engine)
	}
	_, err = run(t, "estimate", "--profile", qwen, "--gpu", "A100-80GB")
	if exitCode(err) != ExitUsage || !strings.Contains(err.Error(), "GPU H100-SXM, not A100") {
		t.Errorf("a --gpu that disagrees with the profile: %v, want exit 2 naming both", err)
	}
}

// calibrate refuses to fit the default model to a run that served
// another, and says which flags to give.
func TestCalibrateRefusesAnotherServedModel(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	writeRun(t, dir, 30)
	if err := results.WriteRunInfo(dir, results.RunInfo{Model: "model-10x640.gguf", Target: "http://127.0.0.1:8080"}); err != nil {
		t.Fatal(err)
	}
	_, err := run(t, "calibrate", dir, "-o", filepath.Join(t.TempDir(), "p.yaml"))
	if exitCode(err) != ExitUsage || !strings.Contains(err.Error(), `served model "model-10x640.gguf", but no --model was given`) {
		t.Errorf("err %v, want exit 2 naming the served model", err)
	}
	if !sameModel("meta-llama/Llama-3.1-8B-Instruct", "Llama-3.1-8B") || sameModel("model-10x640.gguf", "Llama-3.1-8B") {
		t.Error("sameModel does not tell a Hugging Face id of the model from another model")
	}
}

// A llama.cpp twin on one CPU thread, as a new user tries it (simulate
// --engine llamacpp, then report with an SLO): the what-if speaks
// llama-server's settings and offers only its levers, defines "falls
// behind" where it says it, and no advice contradicts itself (#37).
func TestLlamaCppTwinReportSpeaksLlamaCpp(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates a run and its what-if")
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfg, []byte(`{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":640,`+
		`"intermediate_size":1728,"num_hidden_layers":10,"num_attention_heads":10,"num_key_value_heads":2,`+
		`"vocab_size":32000,"max_position_embeddings":4096,"torch_dtype":"bfloat16"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "run")
	if o, err := run(t, "simulate", "--engine", "llamacpp", "--gpu", "cpu-zen5-1t", "--model", cfg, "--prefix-tokens", "192",
		"--input-tokens", "256", "--output-tokens", "32", "--rate", "4", "--requests", "60", "--seed", "5", "--output-dir", out); err != nil {
		t.Fatalf("simulate: %v\n%s", err, o)
	}
	text, err := run(t, "report", out, "--slo", "ttft:p99<=200ms")
	if exitCode(err) != ExitSLOFailed {
		t.Fatalf("report: %v\n%s", err, text)
	}
	_, whatIf, ok := strings.Cut(text, "WHAT-IF")
	if !ok {
		t.Fatalf("the report has no WHAT-IF section:\n%s", text)
	}
	whatIf, _, _ = strings.Cut("WHAT-IF"+whatIf, "\nLATENCY")
	for _, vllm := range []string{"max_num_batched_tokens", "max_num_seqs 8", "tensor parallelism", "disaggregated", "fp8",
		"priority scheduling", "dtype:"} {
		if strings.Contains(whatIf, vllm) {
			t.Errorf("the llama.cpp twin's what-if says %q:\n%s", vllm, whatIf)
		}
	}
	for _, want := range []string{"slots (-np) 4, batch (-b) 2048", "note: falls behind: "} {
		if !strings.Contains(strings.Join(strings.Fields(whatIf), " "), want) {
			t.Errorf("the what-if lacks %q:\n%s", want, whatIf)
		}
	}
	if strings.Contains(text, "instead of the") && strings.Contains(text, "would not shorten") {
		t.Errorf("the advice contradicts itself:\n%s", text)
	}
}

// report DIR of a bench run judges the SLOs the run was benched with: the
// run that failed its own --slo fails its report too (exit 3, the verdict
// names it); --slo on report overrides, "" judges none (#37).
func TestReportJudgesTheRunsOwnSLO(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the embedded engine")
	}
	dir := filepath.Join(t.TempDir(), "run")
	if out, err := run(t, "bench", "--out", dir, "--requests", "6", "--rate", "50", "--output-tokens", "4",
		"--no-calibration", "--slo", "ttft:p99<=1us"); exitCode(err) != ExitSLOFailed {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{nil, ExitSLOFailed, "SLOs FAIL (1 of 1): ttft:p99<=1µs"},
		{[]string{"--format", "md", "-o", "-"}, ExitSLOFailed, `SLOs judged: the run's own --slo "ttft:p99<=1us" (config.json)`},
		{[]string{"--slo", "ttft:p99<=1h"}, ExitOK, "SLOs met (1 of 1)"},
		{[]string{"--slo", ""}, ExitOK, "no SLO given"},
	} {
		out, err := run(t, append([]string{"report", dir}, tt.args...)...)
		if exitCode(err) != tt.code || !strings.Contains(out, tt.want) || strings.Contains(out, "no SLO given") != (tt.want == "no SLO given") {
			t.Errorf("report %v: exit %d (%v), want %d and %q:\n%s", tt.args, exitCode(err), err, tt.code, tt.want, out)
		}
	}
}

// bench's own summary ends with the what-if when the run fails its SLO:
// the top remedy (or why none is ranked) in one line for the embedded
// engine, computed as report computes it; for a real server, why the
// twin cannot be built and the report command that prices the remedies
// (#37, item 7).
func TestBenchSummaryNamesTheWhatIf(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the embedded engine and its what-if")
	}
	url := serveWith(t, nil) + "/v1"
	dir := t.TempDir()
	for _, tt := range []struct {
		name string
		url  []string
		want []string
	}{
		{"embedded", nil, []string{"tokentrace report " + filepath.Join(dir, "embedded")}},
		{"server", []string{"--url", url}, []string{"what-if   skipped: the run came from a real server",
			"price the remedies with: tokentrace report " + filepath.Join(dir, "server") + " --profile FILE"}},
	} {
		args := append([]string{"bench", "--output-dir", filepath.Join(dir, tt.name), "--requests", "8", "--rate", "50",
			"--output-tokens", "4", "--no-calibration", "--slo", "ttft:p99<=1us"}, tt.url...)
		out, err := run(t, args...)
		if exitCode(err) != ExitSLOFailed {
			t.Fatalf("%s: %v\n%s", tt.name, err, out)
		}
		var lines []string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "what-if   ") {
				lines = append(lines, l)
			}
		}
		if len(lines) != 1 {
			t.Fatalf("%s: %d what-if lines, want 1:\n%s", tt.name, len(lines), out)
		}
		for _, w := range tt.want {
			if !strings.Contains(lines[0], w) {
				t.Errorf("%s: the what-if line lacks %q:\n%s", tt.name, w, lines[0])
			}
		}
		if tt.url == nil && !strings.Contains(lines[0], "top of ") && !strings.Contains(lines[0], "no remedy ranked") &&
			!strings.Contains(lines[0], "none of ") {
			t.Errorf("%s: the what-if line names no remedy nor why:\n%s", tt.name, lines[0])
		}
	}
}
