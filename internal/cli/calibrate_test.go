package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/results"
)

// writeProfile writes a valid profile for model on one H100-SXM.
func writeProfile(t *testing.T, dir, model string) string {
	t.Helper()
	eff := perfmodel.DefaultEfficiency(perfmodel.GPU{Name: "H100-SXM"})
	eff.StepOverhead = 2 * time.Millisecond
	p := &perfmodel.Profile{Schema: perfmodel.ProfileSchema, Model: model, GPU: "H100-SXM", TP: 1, DType: "bf16", KVDType: "bf16",
		Constants: perfmodel.ProfileFromEfficiency(eff),
		Range:     perfmodel.FitRange{BatchMin: 1, BatchMax: 8, InputMin: 100, InputMax: 1000, OutputMin: 10, OutputMax: 100}}
	path := filepath.Join(dir, model+".yaml")
	if err := p.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// Bad calibration input exits 2 with a message naming what is wrong and
// writes no profile: records without lengths or timestamps, a folder with
// none, a starting profile for another model, an unknown GPU. A profile
// for another model given to serve, estimate or bench --sim-* exits 2 too.
func TestCalibrateBadInput(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	writeRun(t, good, 30)
	mutate := func(name, from, to string) string {
		d := filepath.Join(dir, name)
		writeRun(t, d, 30)
		f := filepath.Join(d, results.RequestsFile)
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, bytes.ReplaceAll(b, []byte(from), []byte(to)), 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}
	noLengths := mutate("nolengths", `"input_tokens":10`, `"input_tokens":0`)
	noTimes := mutate("notimes", `"first_token_ns":`, `"x_first_token_ns":`)
	qwen := writeProfile(t, dir, "Qwen2.5-7B")
	out := filepath.Join(dir, "out.yaml")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"calibrate", noLengths, "-o", out}, "no input/output token counts"},
		{[]string{"calibrate", noTimes, "-o", out}, "no first-token or end timestamp"},
		{[]string{"calibrate", filepath.Join(dir, "missing"), "-o", out}, "no such file"},
		// A profile supplies its model; a flag that disagrees with it is refused.
		{[]string{"calibrate", good, "-o", out, "--profile", qwen, "--model", "Llama-3.1-8B"}, "--profile"},
		{[]string{"calibrate", good, "-o", out, "--gpu", "H999"}, "--gpu"},
		{[]string{"serve", "--profile", qwen, "--model", "Llama-3.1-8B", "--port", "0"}, "profile is for model Qwen2.5-7B, not Llama-3.1-8B"},
		{[]string{"estimate", "--profile", qwen, "--model", "Llama-3.1-8B"}, "profile is for model Qwen2.5-7B"},
		{[]string{"bench", "--sim-profile", qwen, "--sim-model", "Llama-3.1-8B", "--requests", "1"}, "--sim-profile"},
	} {
		root := NewRoot()
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		root.SetArgs(c.args)
		var stderr bytes.Buffer
		if code := exitStatus(root, root.Execute(), &stderr); code != ExitUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit status %d, %q; want 2 and %q", c.args, code, strings.TrimSpace(stderr.String()), c.want)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Fatalf("%v: the profile was written", c.args)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 4 {
		t.Errorf("the folder holds %d entries, want the 4 the test wrote (no temporary files left)", len(ents))
	}
}

// estimate --profile applies the profile's constants and says when a
// batch size or length lies outside the range it was fitted on.
func TestEstimateProfile(t *testing.T) {
	llama := writeProfile(t, t.TempDir(), "Llama-3.1-8B")
	out, err := run(t, "estimate", "--profile", llama, "--batch", "4,64", "--input-tokens", "500", "--output-tokens", "50")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"overheads 2ms per step", "batch 64 is outside the fitted 1–8", "profile: fitted on"} {
		if !strings.Contains(out, want) {
			t.Errorf("estimate --profile: no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "input 500") {
		t.Errorf("input 500 lies inside the fitted range:\n%s", out)
	}
	// Batch sizes 4 and 64 with output 50 inside 10–100: one warning, once.
	if n := strings.Count(out, "outside the profile's range"); n != 1 {
		t.Errorf("%d warnings, want 1 (batch 64):\n%s", n, out)
	}
}

// estimate --seq-overhead sets the per-sequence cost and shows it.
func TestEstimateSeqOverhead(t *testing.T) {
	base, err := run(t, "estimate", "--batch", "64", "--json")
	if err != nil {
		t.Fatal(err)
	}
	with, err := run(t, "estimate", "--batch", "64", "--json", "--seq-overhead", "70us")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(with, `"seq_overhead_us": 70`) || base == with {
		t.Errorf("--seq-overhead 70us not applied:\n%s", with)
	}
	text, err := run(t, "estimate", "--batch", "64", "--seq-overhead", "70us")
	if err != nil || !strings.Contains(text, "+ 70µs per sequence") {
		t.Errorf("text: %v\n%s", err, text)
	}
}

// simulate --profile times the engine with the profile's constants (the
// same run is slower with a profile whose step overhead is larger) and
// warns where the run went outside the range the profile was fitted on;
// a profile for another model is bad input.
func TestSimulateProfile(t *testing.T) {
	dir := t.TempDir()
	llama := writeProfile(t, dir, "Llama-3.1-8B") // batch 1–8, input 100–1000, output 10–100
	args := []string{"simulate", "--concurrency", "16", "--requests", "48", "--input-tokens", "500", "--output-tokens", "200"}
	plain, err := run(t, append(args, "--output-dir", filepath.Join(dir, "plain"))...)
	if err != nil {
		t.Fatal(err)
	}
	with, err := run(t, append(args, "--output-dir", filepath.Join(dir, "with"), "--profile", llama)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"batch 16 is outside the fitted 1–8", "output 200 is outside the fitted 10–100"} {
		if !strings.Contains(with, want) {
			t.Errorf("no %q in\n%s", want, with)
		}
	}
	if strings.Contains(plain, "outside the profile") || strings.Contains(with, "input 500") {
		t.Errorf("warnings where none is due:\n%s", with)
	}
	tpot := func(name string) float64 {
		b, err := os.ReadFile(filepath.Join(dir, name, "summary.json"))
		if err != nil {
			t.Fatal(err)
		}
		var s struct {
			Report struct {
				Metrics []struct {
					Metric string  `json:"metric"`
					P50    float64 `json:"p50_ms"`
				} `json:"metrics"`
			} `json:"report"`
		}
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		for _, m := range s.Report.Metrics {
			if m.Metric == "tpot" {
				return m.P50
			}
		}
		t.Fatalf("%s: no tpot in summary.json", name)
		return 0
	}
	// The profile's 2 ms step overhead against the default 1.5 ms.
	if p, w := tpot("plain"), tpot("with"); !(w > p+0.4) {
		t.Errorf("TPOT P50 %.2f ms with the profile, %.2f ms without: the profile's constants did not reach the engine", w, p)
	}
}
