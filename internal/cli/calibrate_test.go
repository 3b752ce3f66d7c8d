package cli

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/bench"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
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
		f := filepath.Join(d, bench.RequestsFile)
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
		{[]string{"calibrate", good, "-o", out, "--profile", qwen}, "--profile"},
		{[]string{"calibrate", good, "-o", out, "--gpu", "H999"}, "--gpu"},
		{[]string{"serve", "--profile", qwen, "--port", "0"}, "profile is for model Qwen2.5-7B"},
		{[]string{"estimate", "--profile", qwen}, "profile is for model Qwen2.5-7B"},
		{[]string{"bench", "--sim-profile", qwen, "--requests", "1"}, "--sim-profile"},
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
}
