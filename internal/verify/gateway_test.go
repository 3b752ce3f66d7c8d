package verify

import (
	"strings"
	"testing"

	"github.com/tokentrace/tokentrace/internal/capacity"
	"github.com/tokentrace/tokentrace/internal/engine"
)

// The gateway's limit folded into the engines, by hand: max_num_seqs 8.
func TestFoldGateway(t *testing.T) {
	for _, tt := range []struct {
		name               string
		replicas, wait     int
		g                  gatewayLimit
		wantSeqs, wantWait int
		wantNote           bool
	}{
		{"no limit", 1, 0, gatewayLimit{0, 1024}, 8, 0, false},
		{"below the batch: fewer sequences, the gateway's queue", 1, 0, gatewayLimit{4, 6}, 4, 6, true},
		{"above the batch: the excess waits in the engine too", 1, 0, gatewayLimit{12, 6}, 8, 6 + 4, true},
		{"two replicas share it", 2, 0, gatewayLimit{12, 5}, 6, 3, true},
		{"the engine's own bound", 1, 2, gatewayLimit{12, 6}, 8, 6 + 2, true},
		{"no queue: one waiting at most", 1, 0, gatewayLimit{4, 0}, 4, 1, true},
	} {
		d := capacity.Deployment{Engine: engine.DefaultOptions(), Replicas: tt.replicas}
		d.Engine.MaxNumSeqs, d.Engine.MaxWaiting = 8, tt.wait
		note, err := foldGateway(&d, tt.g)
		if err != nil || d.Engine.MaxNumSeqs != tt.wantSeqs || d.Engine.MaxWaiting != tt.wantWait || (note != "") != tt.wantNote {
			t.Errorf("%s: seqs %d, waiting %d, note %q, %v; want %d, %d", tt.name, d.Engine.MaxNumSeqs, d.Engine.MaxWaiting, note, err, tt.wantSeqs, tt.wantWait)
		}
	}
}

// A change in the gateway's configuration evidence is found, named by
// lever, and the limit after it is the second run's.
func TestDiffFindsTheGatewaysLevers(t *testing.T) {
	gw := func(conc, queue, early string) Run {
		return run(map[string]string{"replicas": "1", "balancer": "least_outstanding", keyGatewayConcurrency: conc,
			keyGatewayMaxQueue: queue, "early_reject": early}, nil)
	}
	a, b := gw("0", "1024", "false"), gw("4", "8", "true")
	cs := Diff(a, b)
	var lines []string
	for _, c := range cs {
		lines = append(lines, c.String())
	}
	want := "early_reject: false → true (server) — not modelled: the twin has no such setting\n" +
		"gateway_concurrency: 0 → 4 (server)\ngateway_max_queue: 1024 → 8 (server)"
	if got := strings.Join(lines, "\n"); got != want {
		t.Fatalf("Diff:\n%s\nwant:\n%s", got, want)
	}
	if leverName(cs) != "gateway-admission" {
		t.Errorf("lever %q", leverName(cs))
	}
	before, err := gatewayLimitOf(a.server(), cs, false)
	after, err2 := gatewayLimitOf(a.server(), cs, true)
	if err != nil || err2 != nil || before != (gatewayLimit{0, 1024}) || after != (gatewayLimit{4, 8}) {
		t.Errorf("limits %+v → %+v (%v, %v)", before, after, err, err2)
	}
	applied, err := ParseApplied("gateway-concurrency=2:6")
	if err != nil || applied.Setting != keyGatewayConcurrency {
		t.Fatalf("ParseApplied: %+v, %v", applied, err)
	}
	if g, _ := gatewayLimitOf(nil, []Change{applied}, false); g.conc != 2 {
		t.Errorf("applied FROM: %+v", g)
	}
}

// The first run's gateway sets the twin's replica set and balancer; a run
// without one leaves the twin as rebuilt.
func TestGatewayBasis(t *testing.T) {
	d := capacity.Deployment{Replicas: 1}
	notes, err := gatewayBasis(&d, map[string]string{keyGatewayConcurrency: "0", "replicas": "3", "balancer": "round_robin"})
	if err != nil || d.Replicas != 3 || d.Balancer != "round_robin" || len(notes) != 2 {
		t.Fatalf("gatewayBasis: %+v, %v, %q", d, err, notes)
	}
	d = capacity.Deployment{Replicas: 1}
	if notes, err := gatewayBasis(&d, map[string]string{"replicas": "3"}); err != nil || d.Replicas != 1 || notes != nil {
		t.Errorf("without a gateway: %+v, %v, %q", d, err, notes)
	}
	if _, err := gatewayBasis(&d, map[string]string{keyGatewayConcurrency: "0", "balancer": "random"}); err == nil {
		t.Error("an unknown balancer: no error")
	}
}
