package cli

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/process"
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
	out, err := process.Output(exec.Command(gobin, "list", "-json", module+"/..."))
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
//     through another package: they run on a virtual clock;
//   - cmd/tokentrace is a shim: it imports internal/cli and os, nothing
//     else;
//   - bench never links the server it measures: serve, engine, gateway
//     and app are none of its dependencies, not even indirect ones.
func TestImportRules(t *testing.T) {
	cliPath, cmdPath := module+"/internal/cli", module+"/cmd/tokentrace"
	for _, p := range listPackages(t) {
		name := strings.TrimPrefix(p.ImportPath, module+"/")
		if slices.Contains([]string{"internal/engine", "internal/route", "internal/simulate"}, name) && slices.Contains(p.Deps, "net/http") {
			t.Errorf("%s depends on net/http", name)
		}
		if name == "internal/bench" {
			for _, server := range []string{"serve", "engine", "gateway", "app"} {
				if slices.Contains(p.Deps, module+"/internal/"+server) {
					t.Errorf("internal/bench depends on internal/%s: the load generator links the server it measures", server)
				}
			}
		}
		for _, imp := range p.Imports {
			switch {
			case p.ImportPath == cmdPath && imp != cliPath && imp != "os":
				t.Errorf("cmd/tokentrace imports %s: it is a shim that calls cli.Main, nothing else", imp)
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

// neverImports is what each package's doc comment (doc.go) says it must
// never import of this module: the packages named, or, for "only", every
// package of this module but those named (an empty "only" list: none at
// all). docs/architecture.md draws the picture these rules keep true.
var neverImports = map[string]struct{ only, never []string }{
	"internal/field":                   {only: []string{}},
	"internal/latency":                 {only: []string{}},
	"internal/stats":                   {only: []string{}},
	"internal/chart":                   {only: []string{}},
	"internal/prediction":              {only: []string{}},
	"internal/jsonscan":                {only: []string{}},
	"internal/sse":                     {only: []string{}},
	"internal/httplimit":               {only: []string{"field"}},
	"internal/h1":                      {only: []string{}},
	"internal/staleconn":               {only: []string{}},
	"internal/staleconn/staleconntest": {only: []string{}},
	"internal/redact":                  {only: []string{}},
	"internal/scrape":                  {only: []string{}},
	"internal/route":                   {only: []string{}},
	"internal/tokenizer":               {only: []string{}},
	"internal/openai":                  {only: []string{"jsonscan"}},
	"internal/tracing":                 {only: []string{"latency", "redact"}},
	"internal/redisstate":              {only: []string{"redact"}},
	"internal/llamacpptest":            {only: []string{"enginetest", "gguf", "process"}},
	"internal/ollamatest":              {only: []string{"enginetest", "gguf", "process"}},
	"internal/gguf":                    {only: []string{}},
	"internal/enginetest":              {only: []string{"gguf", "tokenizer"}},
	"internal/process":                 {only: []string{}},
	"internal/racedetect":              {only: []string{}},
	"internal/openaitest":              {only: []string{"sse"}},
	"internal/browsertest":             {only: []string{"process"}},
	"internal/npmtest":                 {only: []string{}},
	"internal/perfmodel":               {only: []string{"field", "gguf"}},
	"internal/workload":                {only: []string{"field", "tokenizer"}},
	"internal/results":                 {only: []string{"field", "jsonscan", "latency"}},
	"internal/window":                  {only: []string{"latency", "stats"}},
	"internal/engine":                  {only: []string{"field", "perfmodel", "workload"}},
	"internal/report":                  {never: []string{"bench", "serve", "gateway", "app"}},
	"internal/serve":                   {never: []string{"bench", "gateway", "app", "report", "simulate", "calibrate", "capacity"}},
	"internal/gateway":                 {never: []string{"serve", "engine", "perfmodel", "bench", "app", "report", "simulate"}},
	"internal/app":                     {never: []string{"serve", "gateway", "engine", "bench", "report"}},
	"internal/bench":                   {never: []string{"serve", "gateway", "app", "engine", "perfmodel", "simulate"}},
	"internal/simulate":                {never: []string{"serve", "gateway", "bench", "app"}},
	"internal/calibrate":               {never: []string{"serve", "gateway", "bench", "app"}},
	"internal/capacity":                {never: []string{"serve", "gateway", "bench", "app", "report"}},
	"internal/agent":                   {never: []string{"serve", "gateway", "app", "bench", "engine", "report", "simulate"}},
	"internal/whatif":                  {never: []string{"serve", "gateway", "bench", "app", "agent"}},
	"internal/verify":                  {never: []string{"serve", "gateway", "bench", "app", "agent", "whatif"}},
	"internal/live":                    {never: []string{"bench", "serve", "gateway", "app", "engine", "simulate"}},
	"internal/cli":                     {},
	// test-helper subpackages (each may import its parent besides)
	"internal/gateway/gatewaytest":     {only: []string{}},
	"internal/workload/workloadtest":   {only: []string{}},
	"internal/httplimit/httplimittest": {only: []string{}},
	"internal/tracing/otlptest":        {only: []string{}},
	"internal/redisstate/redistest":    {only: []string{"process"}},
	// the measuring harness (it runs the gateway as a binary)
	"bench/floor": {only: []string{"latency", "process", "scrape", "stats"}},
	// Splitwise's slowdown judge (it reads two results folders)
	"bench/splitwise/slowdown": {only: []string{"latency", "results"}},
}

// commandPackages are the subcommands' capability packages that only
// internal/cli may import (the flow runs one way, through the command line).
var commandPackages = []string{"internal/app", "internal/bench", "internal/gateway", "internal/serve", "internal/whatif"}

// TestDocumentedImports checks neverImports and commandPackages on every
// package's non-test imports, and that every package under internal/ and
// bench/ has a rule, test-helper subpackages included (a new package
// states its own in its doc.go and here).
func TestDocumentedImports(t *testing.T) {
	for _, p := range listPackages(t) {
		name := strings.TrimPrefix(p.ImportPath, module+"/")
		rule, ok := neverImports[name]
		if !ok && (strings.HasPrefix(name, "internal/") || strings.HasPrefix(name, "bench/")) {
			t.Errorf("%s has no import rule in neverImports (and its doc.go)", name)
		}
		for _, imp := range p.Imports {
			dep, ours := strings.CutPrefix(imp, module+"/internal/")
			if !ours {
				continue
			}
			dep, _, _ = strings.Cut(dep, "/") // a test-helper subpackage counts as its parent
			if "internal/"+dep == name || strings.HasPrefix(name, "internal/"+dep+"/") {
				continue // within a package, or a test-helper subpackage using its parent
			}
			switch {
			case rule.only != nil && !slices.Contains(rule.only, dep):
				t.Errorf("%s imports internal/%s: its doc.go allows only %v", name, dep, rule.only)
			case slices.Contains(rule.never, dep):
				t.Errorf("%s imports internal/%s, which its doc.go says it never does", name, dep)
			}
			if slices.Contains(commandPackages, "internal/"+dep) && name != "internal/cli" {
				t.Errorf("%s imports internal/%s: only internal/cli imports a command's package", name, dep)
			}
		}
	}
}

// TestArchitectureDoc checks docs/architecture.md against go list: its
// package table names every internal package once, and its import table
// ("Exactly, per package") says exactly what each package imports of this
// module (a test-helper subpackage counting as its parent). A failure
// prints the row the table should have.
func TestArchitectureDoc(t *testing.T) {
	doc, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	described, documented := architectureTables(t, string(doc))
	actual := map[string]string{}
	for _, p := range listPackages(t) {
		name, ok := strings.CutPrefix(p.ImportPath, module+"/internal/")
		if !ok || strings.Contains(name, "/") {
			continue
		}
		var deps []string
		for _, imp := range p.Imports {
			dep, ours := strings.CutPrefix(imp, module+"/internal/")
			dep, _, _ = strings.Cut(dep, "/")
			if ours && dep != name && !slices.Contains(deps, dep) {
				deps = append(deps, dep)
			}
		}
		slices.Sort(deps)
		actual[name] = strings.Join(deps, ", ")
	}
	for name, deps := range actual {
		if described[name] != 1 {
			t.Errorf("docs/architecture.md's package table lists internal/%s %d times, want once", name, described[name])
		}
		got, ok := documented[name]
		switch {
		case !ok:
			t.Errorf("docs/architecture.md's import table lacks %s; its row: | `%s` | %s |", name, name, orNothing(deps))
		case got != deps:
			t.Errorf("docs/architecture.md's import table says %s imports %q; go list says %q", name, orNothing(got), orNothing(deps))
		}
	}
	for name := range documented {
		if _, ok := actual[name]; !ok {
			t.Errorf("docs/architecture.md's import table lists %s, which is no package of internal/", name)
		}
	}
}

func orNothing(deps string) string {
	if deps == "" {
		return "nothing of this module"
	}
	return deps
}

// architectureTables reads docs/architecture.md's two tables: how many
// times the package table ("| package | its job |") names each internal
// package, and the import table's imports of each package ("" for
// "nothing of this module"), a row naming several packages giving each
// the same imports.
func architectureTables(t *testing.T, doc string) (described map[string]int, imports map[string]string) {
	t.Helper()
	described, imports = map[string]int{}, map[string]string{}
	var table string
	for line := range strings.SplitSeq(doc, "\n") {
		switch {
		case strings.HasPrefix(line, "| package | its job |"):
			table = "packages"
		case strings.HasPrefix(line, "| package | imports |"):
			table = "imports"
		case !strings.HasPrefix(line, "|"):
			table = ""
		case strings.HasPrefix(line, "|---"):
		case table == "packages":
			cell, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
			if name, ok := strings.CutPrefix(strings.Trim(cell, "`"), "internal/"); ok {
				described[name]++
			}
		case table == "imports":
			cells := strings.Split(strings.Trim(line, "| "), " | ")
			if len(cells) != 2 {
				t.Fatalf("import table row %q: want two cells", line)
			}
			deps := cells[1]
			if deps == "nothing of this module" {
				deps = ""
			}
			for name := range strings.SplitSeq(cells[0], ", ") {
				name = strings.Trim(name, "`")
				if _, dup := imports[name]; dup {
					t.Errorf("docs/architecture.md's import table lists %s twice", name)
				}
				imports[name] = deps
			}
		}
	}
	if len(described) == 0 || len(imports) == 0 {
		t.Fatal("docs/architecture.md: package or import table not found")
	}
	return described, imports
}
