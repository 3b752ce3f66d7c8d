package cli

import (
	"bytes"
	"runtime/debug"
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
	if err != nil || !strings.HasPrefix(out, "tokentrace dev") {
		t.Fatalf("version: %q, %v", out, err)
	}
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "d137f21a9b3c4e5f60718293a4b5c6d7e8f90123"}, {Key: "vcs.time", Value: "2026-12-07T04:40:00Z"},
		{Key: "vcs.modified", Value: "true"}}}
	if got, want := versionLine("dev", bi), "dev (commit d137f21a9b3c (modified) 2026-12-07T04:40:00Z, go1.26.0)"; got != want {
		t.Errorf("versionLine %q, want %q", got, want)
	}
	// go run ./cmd/tokentrace version (issue #37): go run stamps no commit, and says so.
	bi = &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}}
	if got := versionLine("dev", bi); !strings.Contains(got, "no commit recorded") || !strings.Contains(got, "go build or go install") {
		t.Errorf("go run: versionLine %q does not say why no commit is shown", got)
	}
	bi = &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.3"}}
	if got, want := versionLine("dev", bi), "v1.2.3 (go1.26.0)"; got != want {
		t.Errorf("go install'ed: versionLine %q, want %q", got, want)
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
