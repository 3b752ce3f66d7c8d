package cli

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/tokentrace/tokentrace"

// pkg is what `go list -json` says of a package.
type pkg struct {
	ImportPath string
	Imports    []string // direct, non-test imports
	Deps       []string // every package it depends on, non-test
}

// listPackages runs go list over the module's packages.
func listPackages(t *testing.T) []pkg {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to list the packages")
	}
	out, err := exec.Command(gobin, "list", "-json", module+"/...").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages", len(pkgs))
	}
	return pkgs
}

// TestImportRules checks the house rules on imports (docs/architecture.md),
// on every package's non-test imports:
//
//   - no package outside cli and cmd imports cobra or pflag;
//   - nothing imports cli but cmd/tokentrace;
//   - latency imports nothing of this module;
//   - perfmodel imports no engine, serve, bench or gateway;
//   - engine imports no net/http; neither do the simulator and the
//     placement policies it shares with the gateway (route), not even
//     through another package: they run on a virtual clock.
func TestImportRules(t *testing.T) {
	cliPath, cmdPath := module+"/internal/cli", module+"/cmd/tokentrace"
	for _, p := range listPackages(t) {
		name := strings.TrimPrefix(p.ImportPath, module+"/")
		if slices.Contains([]string{"internal/engine", "internal/route", "internal/simulate"}, name) && slices.Contains(p.Deps, "net/http") {
			t.Errorf("%s depends on net/http", name)
		}
		for _, imp := range p.Imports {
			switch {
			case (strings.HasPrefix(imp, "github.com/spf13/cobra") || strings.HasPrefix(imp, "github.com/spf13/pflag")) &&
				p.ImportPath != cliPath && p.ImportPath != cmdPath:
				t.Errorf("%s imports %s: flags belong to internal/cli", name, imp)
			case imp == cliPath && p.ImportPath != cmdPath:
				t.Errorf("%s imports internal/cli: nothing but cmd/tokentrace may", name)
			case name == "internal/latency" && strings.HasPrefix(imp, module+"/"):
				t.Errorf("internal/latency imports %s: the vocabulary imports nothing of this module", imp)
			case name == "internal/perfmodel" && slices.Contains([]string{"engine", "serve", "bench", "gateway"}, strings.TrimPrefix(imp, module+"/internal/")):
				t.Errorf("internal/perfmodel imports %s", imp)
			case name == "internal/engine" && imp == "net/http":
				t.Errorf("internal/engine imports net/http")
			}
		}
	}
}
