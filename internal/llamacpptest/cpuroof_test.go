package llamacpptest

import (
	"bytes"
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/process"
)

// TestCPURoofBuildsAndRuns keeps testdata/cpuroof.c, the measurement behind
// the cpu-zen5-1t device (docs/performance.md, "A CPU thread as the
// device"), from rotting: it compiles it with the command the document
// gives and runs it once per figure (argument 1, not the 300 runs of a
// measurement), holding it to the lines it prints — each figure's name and
// a positive number — and never to their values. It skips where there is
// no C compiler or the CPU is not x86-64; where the CPU lacks the ISA the
// file is built for (AVX2, FMA, F16C), it compiles it and skips the run.
func TestCPURoofBuildsAndRuns(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("cpuroof.c is x86-64 (AVX2, FMA, F16C); this is %s", runtime.GOARCH)
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		if cc, err = exec.LookPath("gcc"); err != nil {
			t.Skip("no C compiler (cc or gcc) on PATH")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "cpuroof")
	build := process.CommandGroup(ctx, cc, "-O2", "-mavx2", "-mfma", "-mf16c", "-o", bin, filepath.Join("testdata", "cpuroof.c"))
	if out, err := process.CombinedOutput(build); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(build.Args, " "), err, out)
	}
	if missing := missingCPUFlags(t, "avx2", "fma", "f16c"); len(missing) > 0 {
		t.Skipf("built; not run: this CPU lacks %v", missing)
	}
	run := exec.CommandContext(ctx, bin, "1")
	var stderr bytes.Buffer
	run.Stderr = &stderr
	out, err := process.Output(run)
	if err != nil {
		t.Fatalf("cpuroof 1: %v\n%s%s", err, out, stderr.Bytes())
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			t.Errorf("line %q: want a name and a figure", line)
			continue
		}
		names = append(names, strings.Join(f[:len(f)-1], " "))
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err != nil || math.IsNaN(v) || v <= 0 {
			t.Errorf("line %q: the figure is not a positive number", line)
		}
	}
	want := []string{"fma_f32_gflops", "f16_dot_gflops", "read_gb_s 19_MiB", "read_gb_s 512_MiB"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("cpuroof's figures (-want +got):\n%s\noutput:\n%s", diff, out)
	}
}

// missingCPUFlags returns those of flags /proc/cpuinfo does not list for
// the first CPU (all of them where it cannot be read).
func missingCPUFlags(t *testing.T, flags ...string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Logf("cannot read the CPU's flags: %v", err)
		return flags
	}
	have := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if name, list, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "flags" {
			for _, f := range strings.Fields(list) {
				have[f] = true
			}
			break
		}
	}
	var missing []string
	for _, f := range flags {
		if !have[f] {
			missing = append(missing, f)
		}
	}
	return missing
}
