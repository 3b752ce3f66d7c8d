package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/results"
)

func TestBenchBadFlagsFailAtStart(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--rate", "0"}, "--rate 0"},
		{[]string{"--rate", "-3"}, "--rate -3"},
		{[]string{"--input-tokens", "zipf:2"}, "unknown distribution"},
		{[]string{"--trace", filepath.Join(dir, "missing.csv")}, "--trace"},
		{[]string{"--arrival", "weibull"}, "--arrival"},
		{[]string{"--url", "localhost:8000"}, "--url"},
		{[]string{"--slo", "ttft:p99>1s"}, "--slo"},
		{[]string{"--warmup", "soon"}, "--warmup"},
		{[]string{"--sweep", "1,x"}, "--sweep"},
		{[]string{"--endpoint", "embeddings"}, "--endpoint"},
		{[]string{"--sim-model", "no-such-model"}, "embedded engine"},
		{[]string{"--rate", "fast"}, "invalid argument"},
		{[]string{"--no-such-flag"}, "unknown flag"},
		{[]string{"--agent-sessions", badSessions(t, dir)}, "--agent-sessions: " + filepath.Join(dir, "sessions.jsonl") + ": line 3: steps[0].tools[1].latency"},
		{[]string{"--agent-steps", "3", "--tool-mode", "eventually"}, "--tool-mode"},
		{[]string{"--agent-steps", "3", "--tool-latency", "soon"}, "--tool-latency"},
		{[]string{"--agent-steps", "3", "--tool-url", "tools:9000"}, "--tool-url"},
		{[]string{"--tool-url", "http://localhost:9000"}, "--tool-url"},
		{[]string{"--agent-tools", "2"}, "--agent-steps"},
		{[]string{"--progress", "fancy"}, "--progress"},
		{[]string{"--live=8765"}, "--live"},
		{[]string{"--live-window", "100ms"}, "--live-window"},
	} {
		_, err := run(t, append([]string{"bench", "--out", filepath.Join(dir, "x")}, tt.args...)...)
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Code != 2 || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err %v, want exit status 2 mentioning %q", tt.args, err, tt.want)
		}
		if _, err := os.Stat(filepath.Join(dir, "x")); err == nil {
			t.Errorf("%v: a results folder was created for a run that never started", tt.args)
		}
	}
}

// badSessions writes a sessions file whose third line has a bad latency.
func badSessions(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "sessions.jsonl")
	body := `{"steps": [{"tools": [{"name": "a"}]}, {}]}` + "\n\n" + `{"steps": [{"tools": [{"name": "a"}, {"name": "b", "latency": "fast"}]}]}` + "\n"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// With no --url bench runs the embedded engine; a failed SLO gives exit
// status 3 and the results are still written.
func TestBenchEmbeddedSLOExitStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the embedded engine")
	}
	dir := filepath.Join(t.TempDir(), "run")
	out, err := run(t, "bench", "--out", dir, "--requests", "12", "--rate", "50", "--output-tokens", "4",
		"--no-calibration", "--slo", "ttft:p99<=1us")
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != ExitSLOFailed {
		t.Fatalf("err %v, want exit status %d\n%s", err, ExitSLOFailed, out)
	}
	for _, f := range []string{"requests.jsonl", "summary.json", "command.txt", "config.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("no %s after a failed SLO", f)
		}
	}
	if !strings.Contains(out, "ttft") || !strings.Contains(out, "fail") {
		t.Errorf("console output lacks the verdict:\n%s", out)
	}
	out, err = run(t, "bench", "--out", dir+"2", "--requests", "6", "--rate", "50", "--output-tokens", "4",
		"--no-calibration", "--slo", "ttft:p99<=1h")
	if err != nil {
		t.Fatalf("SLOs that hold: %v\n%s", err, out)
	}
}

// command.txt and config.json record the command without its credentials.
func TestBenchRecordsNoCredentials(t *testing.T) {
	args := []string{"tokentrace", "bench", "--url", "http://ops:pw-secret-1@10.0.0.1:8000", "--api-key", "sk-secret-2",
		"--api-key=sk-secret-3", "--header", "Authorization: Bearer tok-secret-4", "--header", "X-Api-Key: key-secret-5", "--rate", "5"}
	got := strings.Join(commandLine(args), " ")
	fs := newBenchCmd().Flags()
	if err := fs.Parse(args[2:]); err != nil {
		t.Fatal(err)
	}
	echo := fmt.Sprint(flagValues(fs))
	for _, s := range []string{"pw-secret-1", "sk-secret-2", "sk-secret-3", "tok-secret-4", "key-secret-5"} {
		if strings.Contains(got, s) || strings.Contains(echo, s) {
			t.Errorf("%q recorded:\ncommand %s\nconfig %s", s, got, echo)
		}
	}
	if !strings.Contains(got, "--rate 5") || !strings.Contains(got, "10.0.0.1:8000") {
		t.Errorf("command %q lost what is not a credential", got)
	}
}

// --sim-engine reaches the embedded engine bench starts (its finish hook
// once completed a copy the engine never saw).
// run.json records the family simulated, as simulate's does (#37).
func TestBenchSimEngineReachesTheEmbeddedEngine(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	out, err := run(t, "bench", "--sim-engine", "trtllm", "--requests", "4", "--concurrency", "2", "--input-tokens", "64", "--output-tokens", "4",
		"--output-dir", dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if want := "max_num_batched_tokens=8192 max_num_seqs=2048 chunked_prefill=off prefix_caching=on"; !strings.Contains(out, want) {
		t.Errorf("the embedded engine did not run with --sim-engine trtllm's settings (%q) in:\n%s", want, out)
	}
	info, ok, err := results.ReadRunInfo(dir)
	if err != nil || !ok || info.EngineFamily != "trtllm" {
		t.Errorf("run.json: %+v, %v, %v; want engine_family trtllm", info, ok, err)
	}
}
