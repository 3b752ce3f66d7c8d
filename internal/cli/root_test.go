package cli

import (
	"bytes"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := NewRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestVersion(t *testing.T) {
	out, err := run(t, "version")
	if err != nil || out != "tokentrace dev\n" {
		t.Fatalf("version: %q, %v", out, err)
	}
}

func TestHelpListsSubcommands(t *testing.T) {
	out, err := run(t, "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range NewRoot().Commands() {
		if !c.IsAvailableCommand() {
			continue
		}
		if !strings.Contains(out, c.Name()) || c.Short == "" {
			t.Errorf("--help does not list %q with a one-line description", c.Name())
		}
	}
}

func TestReportBadSLONamesTheFlag(t *testing.T) {
	_, err := run(t, "report", t.TempDir(), "--slo", "ttft:p99>1s")
	if err == nil || !strings.Contains(err.Error(), "--slo") {
		t.Fatalf("err %v, want one naming --slo", err)
	}
}
