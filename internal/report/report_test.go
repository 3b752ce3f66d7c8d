package report

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSmokeText(t *testing.T) {
	rep := collect(Options{}, baseline(200, 10, 1))
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(b.String(), "\n") {
		if n := len([]rune(line)); n > 100 {
			t.Errorf("line %d has %d columns: %q", i+1, n, line)
		}
	}
	t.Log("\n" + b.String())
}

func TestSmokeHTML(t *testing.T) {
	rep := collect(Options{SLOs: mustSLOs(t, "ttft:p99<=1s,e2e:p99<=20s")}, overloadRun(300))
	var b bytes.Buffer
	if err := rep.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(t.TempDir(), "r.html"), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("REPORT_HTML_OUT") != "" {
		os.WriteFile(os.Getenv("REPORT_HTML_OUT"), b.Bytes(), 0o644)
	}
}
