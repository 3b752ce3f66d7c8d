package gateway

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const applyBase = `# the gateway in front of serve
pools:
  - name: main # one pool
    replicas:
      - url: http://127.0.0.1:8000
        kind: tokentrace
routes:
  - model: "*"
    pool: main
`

func TestApplyConfigSetsLeversKeepingComments(t *testing.T) {
	out, notes, err := ApplyConfig([]byte(applyBase), Apply{Levers: []string{"concurrency=4", "max-queue=8", "max-max-tokens=256",
		"balancer=round_robin", "early-reject=true", "deadline-ttft=2s", "replicas=http://127.0.0.1:8000,http://127.0.0.1:8001"}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig(out)
	if err != nil {
		t.Fatal(err)
	}
	p, r := c.Pools[0], c.Routes[0]
	if p.Queue.Concurrency != 4 || p.Queue.MaxSize != 8 || p.Balancer != "round_robin" || len(p.Replicas) != 2 || p.Replicas[1].Kind != "tokentrace" {
		t.Errorf("pool %+v", p)
	}
	if r.Length.MaxMaxTokens != 256 || r.Length.OnExceed != "clamp" || !r.EarlyReject || r.DeadlineTTFT.D().Seconds() != 2 {
		t.Errorf("route %+v", r)
	}
	for _, want := range []string{"# the gateway in front of serve", "# one pool"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("comment %q lost:\n%s", want, out)
		}
	}
	if len(notes) != 7 || notes[0] != "pool main: queue.concurrency unset → 4" || notes[6] != "pool main: replicas 1 → 2" {
		t.Errorf("notes %q", notes)
	}
}

func TestApplyConfigBadInput(t *testing.T) {
	two := applyBase + "  - model: other\n    pool: main\n"
	for _, tt := range []struct {
		data string
		a    Apply
		want string
	}{
		{applyBase, Apply{}, "at least one"},
		{applyBase, Apply{Levers: []string{"warp=9"}}, "LEVER one of"},
		{applyBase, Apply{Levers: []string{"concurrency=-1"}}, "non-negative integer"},
		{applyBase, Apply{Levers: []string{"balancer=random"}}, "is not one of"},
		{applyBase, Apply{Levers: []string{"deadline-ttft=soon"}}, "duration"},
		{applyBase, Apply{Pool: "nope", Levers: []string{"concurrency=2"}}, `no pool "nope"`},
		{two, Apply{Levers: []string{"max-max-tokens=64"}}, "2 routes: name one"},
		{applyBase, Apply{Levers: []string{"replicas=http://a,,http://b"}}, "empty replica"},
		{"pools: [", Apply{Levers: []string{"concurrency=2"}}, "parse config"},
	} {
		if _, _, err := ApplyConfig([]byte(tt.data), tt.a); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ApplyConfig(%v): %v, want an error saying %q", tt.a, err, tt.want)
		}
	}
	// A route named among several is changed alone.
	out, _, err := ApplyConfig([]byte(two), Apply{Route: "other", Levers: []string{"max-max-tokens=64"}})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := ParseConfig(out)
	if c.Routes[0].Length.MaxMaxTokens != 0 || c.Routes[1].Length.MaxMaxTokens != 64 {
		t.Errorf("routes %+v", c.Routes)
	}
}

// The configuration info metric carries each route's levers and follows
// a reload.
func TestConfigInfoFollowsReload(t *testing.T) {
	c, err := ParseConfig([]byte(applyBase))
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := g.Metrics.Register(reg); err != nil {
		t.Fatal(err)
	}
	labels := func(conc, queue string) []string {
		return []string{"*", "main", "1", "least_outstanding", conc, queue, "", "0", "reject", "false", "0s", "0"}
	}
	if v := testutil.ToFloat64(g.Metrics.Config.WithLabelValues(labels("0", "1024")...)); v != 1 {
		t.Fatalf("config info before: %v", v)
	}
	out, _, err := ApplyConfig([]byte(applyBase), Apply{Levers: []string{"concurrency=4", "max-queue=8"}})
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := ParseConfig(out)
	if err := g.SetConfig(c2); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(g.Metrics.Config); n != 1 {
		t.Errorf("%d series after the reload, want 1 (the old one reset)", n)
	}
	if v := testutil.ToFloat64(g.Metrics.Config.WithLabelValues(labels("4", "8")...)); v != 1 {
		t.Errorf("config info after: %v", v)
	}
}

func FuzzApplyConfig(f *testing.F) {
	f.Add(applyBase, "concurrency=3")
	f.Add("pools: []", "balancer=x")
	f.Fuzz(func(t *testing.T, data, lever string) {
		out, _, err := ApplyConfig([]byte(data), Apply{Levers: []string{lever}})
		if err == nil {
			if _, err := ParseConfig(out); err != nil {
				t.Fatalf("ApplyConfig wrote a configuration that does not load: %v", err)
			}
		}
	})
}

// A disaggregated route's configuration info names its prefill pool's
// count beside its decode pool's (verify and what-if read the ratio).
func TestConfigInfoNamesPrefillPool(t *testing.T) {
	c, err := ParseConfig([]byte(`pools:
  - name: prefill
    replicas: [{url: "http://127.0.0.1:1"}]
  - name: decode
    replicas: [{url: "http://127.0.0.1:2"}, {url: "http://127.0.0.1:3"}]
routes:
  - {model: "*", pool: decode, prefill_pool: prefill}
`))
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	labels := []string{"*", "decode", "2", "least_outstanding", "0", "1024", "", "0", "reject", "false", "0s", "1"}
	if v := testutil.ToFloat64(g.Metrics.Config.WithLabelValues(labels...)); v != 1 {
		t.Errorf("config info %v: %v", labels, v)
	}
	if n := testutil.CollectAndCount(g.Metrics.Config); n != 1 {
		t.Errorf("%d series, want 1", n)
	}
}
