package deploy

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/tokentrace/tokentrace/internal/process"
)

// The shipped files, relative to this package's folder.
const (
	promConfigFile    = "prometheus/prometheus.yml"
	promK8sConfigFile = "prometheus/prometheus-kubernetes.yml"
	rulesFile         = "prometheus/tokentrace-rules.yml"
	dashboardsDir     = "grafana/dashboards"
)

// query is one PromQL expression found in a shipped file.
type query struct {
	where string // file and panel, variable or rule
	expr  string
	// alert marks an alerting rule's condition: it returns data only while
	// the alert's condition holds.
	alert bool
}

// grafanaDashboard is the part of a dashboard's JSON the query extraction
// reads; the whole document is checked against Grafana's schema by
// TestDashboardsMatchGrafanaSchema.
type grafanaDashboard struct {
	UID        string         `json:"uid"`
	Title      string         `json:"title"`
	Panels     []grafanaPanel `json:"panels"`
	Templating struct {
		List []grafanaVariable `json:"list"`
	} `json:"templating"`
}

type grafanaPanel struct {
	ID         int               `json:"id"`
	Type       string            `json:"type"`
	Title      string            `json:"title"`
	Datasource map[string]string `json:"datasource"`
	Targets    []struct {
		RefID      string            `json:"refId"`
		Expr       string            `json:"expr"`
		Datasource map[string]string `json:"datasource"`
	} `json:"targets"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Panels  []grafanaPanel           `json:"panels"` // a collapsed row's
}

type grafanaVariable struct {
	Type    string `json:"type"`
	Name    string `json:"name"`
	Query   any    `json:"query"` // a string, or {"query": …} for Prometheus
	Current struct {
		Value any `json:"value"`
	} `json:"current"`
}

// queryString is a query variable's PromQL-side text (label_values(…)).
func (v grafanaVariable) queryString() string {
	switch q := v.Query.(type) {
	case string:
		return q
	case map[string]any:
		s, _ := q["query"].(string)
		return s
	}
	return ""
}

func dashboardFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dashboardsDir, "*.json"))
	if err != nil || len(files) < 2 {
		t.Fatalf("dashboards: %v %v (want the serve and gateway dashboards)", files, err)
	}
	return files
}

func readDashboard(t *testing.T, path string) grafanaDashboard {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return d
}

func allPanels(ps []grafanaPanel) []grafanaPanel {
	var out []grafanaPanel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// labelValues matches Grafana's label_values(selector, label) variable
// query.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

// dashboardQueries returns every PromQL expression of the dashboards: the
// panels' targets and the query variables (label_values(sel, l) becomes
// count by (l) (sel), which returns data exactly when the variable has
// values).
func dashboardQueries(t *testing.T) []query {
	t.Helper()
	var qs []query
	for _, f := range dashboardFiles(t) {
		d := readDashboard(t, f)
		for _, v := range d.Templating.List {
			if v.Type != "query" {
				continue
			}
			m := labelValues.FindStringSubmatch(v.queryString())
			if m == nil {
				t.Fatalf("%s: variable %s: query %q is not label_values(selector, label)", f, v.Name, v.queryString())
			}
			qs = append(qs, query{where: fmt.Sprintf("%s variable %s", filepath.Base(f), v.Name),
				expr: fmt.Sprintf("count by (%s) (%s)", m[2], m[1])})
		}
		for _, p := range allPanels(d.Panels) {
			for _, tg := range p.Targets {
				qs = append(qs, query{where: fmt.Sprintf("%s panel %q target %s", filepath.Base(f), p.Title, tg.RefID), expr: tg.Expr})
			}
		}
	}
	return qs
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record      string            `yaml:"record"`
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.UnmarshalWithOptions(b, &rf, yaml.Strict()); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	return rf
}

// ruleQueries returns every rule's expression.
func ruleQueries(t *testing.T) []query {
	t.Helper()
	var qs []query
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			name := r.Record
			if r.Alert != "" {
				name = "alert " + r.Alert
			}
			qs = append(qs, query{where: fmt.Sprintf("%s %s", filepath.Base(rulesFile), name), expr: r.Expr, alert: r.Alert != ""})
		}
	}
	return qs
}

// grafanaBuiltins are the variables Grafana itself defines.
var grafanaBuiltins = []string{"__rate_interval", "__interval", "__range", "__all"}

var varRef = regexp.MustCompile(`\$\{?(\w+)\}?`)

// TestDashboardsMatchGrafanaSchema decodes each dashboard strictly with
// the Grafana Foundation SDK, whose types and strict decoders are
// generated from Grafana's own schema (the dashboard kind, each panel
// plugin's options and the Prometheus query model): an unknown field, a
// wrong type or a missing required field fails. It then checks what the
// schema cannot: unique panel ids, panels that do not overlap, every
// query on the dashboard's data-source variable, and every variable a
// query uses defined.
func TestDashboardsMatchGrafanaSchema(t *testing.T) {
	plugins.RegisterDefaultPlugins()
	for _, f := range dashboardFiles(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			// The files are classic dashboards (schema v1), which the v2
			// type does not read.
			var sd dashboard.Dashboard //nolint:staticcheck // SA1019: see above
			if err := cogErr(sd.UnmarshalJSONStrict(raw)); err != nil {
				t.Fatalf("not a valid Grafana dashboard:\n%v", err)
			}
			if err := cogErr(sd.Validate()); err != nil {
				t.Fatalf("Grafana schema validation:\n%v", err)
			}
			d := readDashboard(t, f)
			if d.UID == "" || d.Title == "" {
				t.Errorf("uid %q title %q: both are needed for provisioning", d.UID, d.Title)
			}
			defined := slices.Clone(grafanaBuiltins)
			for _, v := range d.Templating.List {
				defined = append(defined, v.Name)
			}
			ids := map[int]bool{}
			var boxes [][4]int
			for _, p := range allPanels(d.Panels) {
				if ids[p.ID] {
					t.Errorf("panel id %d used twice", p.ID)
				}
				ids[p.ID] = true
				g := p.GridPos
				box := [4]int{g.X, g.Y, g.X + g.W, g.Y + g.H}
				if box[2] > 24 || g.W <= 0 || g.H <= 0 {
					t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, g)
				}
				for _, b := range boxes {
					if box[0] < b[2] && b[0] < box[2] && box[1] < b[3] && b[1] < box[3] {
						t.Errorf("panel %q overlaps another at %+v", p.Title, g)
					}
				}
				boxes = append(boxes, box)
				if p.Type == "row" {
					continue
				}
				if len(p.Targets) == 0 {
					t.Errorf("panel %q has no query", p.Title)
				}
				for _, tg := range p.Targets {
					if tg.Datasource["uid"] != "${datasource}" || p.Datasource["uid"] != "${datasource}" {
						t.Errorf("panel %q target %s: data source %v, want the ${datasource} variable", p.Title, tg.RefID, tg.Datasource)
					}
					for _, m := range varRef.FindAllStringSubmatch(tg.Expr, -1) {
						if !slices.Contains(defined, m[1]) {
							t.Errorf("panel %q target %s uses $%s, which the dashboard does not define", p.Title, tg.RefID, m[1])
						}
					}
				}
			}
		})
	}
}

// cogErr is err, or nil for the SDK's empty error list (its strict
// decoders return a nil cog.BuildErrors as a non-nil error).
func cogErr(err error) error {
	var be cog.BuildErrors
	if errors.As(err, &be) && len(be) == 0 {
		return nil
	}
	return err
}

// TestRulesParameters checks that the SLO parameters that are literals in
// the rules (docs/operate.md says how to change them) have one value each:
// the TTFT threshold is the same bucket bound everywhere, and the burn-rate
// alerts use one objective, the SRE workbook's windows and factors.
func TestRulesParameters(t *testing.T) {
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	les := map[string]bool{}
	for _, m := range regexp.MustCompile(`_bucket\{le="([^"]+)"\}`).FindAllStringSubmatch(string(raw), -1) {
		les[m[1]] = true
	}
	if len(les) != 1 {
		t.Errorf("TTFT thresholds %v: want one value", les)
	}
	objectives := map[string]bool{}
	for _, m := range regexp.MustCompile(`\(1 - ([0-9.]+)\)`).FindAllStringSubmatch(string(raw), -1) {
		objectives[m[1]] = true
	}
	if len(objectives) != 1 {
		t.Errorf("objectives %v: want one value", objectives)
	}
	windows := map[string]string{}
	alerts := 0
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			long, short := r.Labels["long_window"], r.Labels["short_window"]
			factor := map[string]string{"1h": "14.4", "6h": "6"}[long]
			want := map[string]string{"1h": "5m", "6h": "30m"}[long]
			if factor == "" || short != want {
				t.Errorf("%s: windows %s/%s, want 1h/5m or 6h/30m", r.Alert, long, short)
				continue
			}
			for _, w := range []string{long, short} {
				cond := fmt.Sprintf("ratio_rate%s > (%s * (1 - ", w, factor)
				if !strings.Contains(r.Expr, cond) {
					t.Errorf("%s: expression lacks %q", r.Alert, cond)
				}
			}
			windows[r.Alert] = long
		}
	}
	if alerts != 4 {
		t.Errorf("%d alerts, want fast and slow burn for the TTFT and availability SLOs", alerts)
	}
}

// TestPromtoolChecks runs Prometheus's own checker on the shipped
// configurations and rules.
func TestPromtoolChecks(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not on PATH (Debian: apt-get install prometheus; .ci/run installs it): the configurations and rules are not checked by Prometheus here")
	}
	for _, args := range [][]string{
		{"check", "rules", rulesFile},
		{"check", "config", promConfigFile},
		{"check", "config", promK8sConfigFile},
	} {
		out, err := process.CombinedOutput(exec.Command(promtool, args...))
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
