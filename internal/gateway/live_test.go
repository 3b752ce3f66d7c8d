package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tokentrace/tokentrace/internal/live"
	"github.com/tokentrace/tokentrace/internal/openaitest"
)

// liveGateway is a gateway with its live view over two upstreams in pool
// p (concurrency 2, a queue of 2), both held by gate.
func liveGateway(t *testing.T, gate chan struct{}) (g *Gateway, data, admin string) {
	t.Helper()
	a := openaitest.Start(t, &openaitest.Upstream{Name: "a", Gate: gate})
	b := openaitest.Start(t, &openaitest.Upstream{Name: "b", Gate: gate})
	g = mustGateway(t, fmt.Sprintf(`
pools: [{name: p, replicas: [{url: %q}, {url: %q}], queue: {concurrency: 2, max_size: 2}}]
routes: [{model: "*", pool: p}]
`, a.URL(), b.URL()))
	g.NewLiveBoard(time.Minute)
	gw := startGateway(t, g)
	ad := httptest.NewServer(g.AdminHandler())
	t.Cleanup(ad.Close)
	return g, gw.URL, ad.URL
}

// liveSnapshot reads the live view's current snapshot from the admin
// listener.
func liveSnapshot(t *testing.T, admin string) *live.Snapshot {
	t.Helper()
	resp, err := http.Get(admin + LivePath + "/snapshot.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s live.Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return &s
}

// TestLiveMatchesMetrics loads the gateway so that it admits, queues and
// refuses, and checks the live view's counts against its own metrics and
// against the counts by hand: 2 in flight + 2 queued (then answered), 2
// refused 429 queue_full, 10 answered after, 3 early rejects (a body that
// is not JSON, before any pool): pool p 16 requests, 14 admitted and
// answered, 2 refused; "(none)" 3 failed; the upstreams 14 between them.
func TestLiveMatchesMetrics(t *testing.T) {
	gate := make(chan struct{})
	g, data, admin := liveGateway(t, gate)
	body := chatBody("m", true, "x", "")
	var wg sync.WaitGroup
	codes := make(chan int, 6)
	send := func() {
		wg.Add(1)
		go func() { defer wg.Done(); s, _, _ := do(t, data, body, nil); codes <- s }()
	}
	for i := range 4 { // 2 admitted, then 2 queued
		send()
		waitFor(t, "admitted or queued", func() bool { d, f, _ := poolState(g, "p"); return d+f == i+1 })
	}
	send()
	send()
	waitFor(t, "two refused", func() bool { return len(codes) == 2 })
	if s := liveSnapshotAfter(t, g, admin); poolRow(t, s, "p").Queued != 2 || poolRow(t, s, "p").InFlight != 2 {
		t.Errorf("while held: pool p %+v, want 2 queued, 2 in flight", poolRow(t, s, "p"))
	}
	close(gate)
	wg.Wait()
	for range 10 {
		if s, _, b := do(t, data, body, nil); s != 200 {
			t.Fatalf("status %d: %s", s, b)
		}
	}
	for range 3 {
		if s, _, _ := do(t, data, "{not json", nil); s != 400 {
			t.Fatalf("a body that is not JSON: %d, want 400", s)
		}
	}
	s := liveSnapshotAfter(t, g, admin)
	p := poolRow(t, s, "p")
	okMetric := int64(testutil.ToFloat64(g.Metrics.seriesFor("p", "*").ok))
	refused := int64(testutil.ToFloat64(g.Metrics.Rejected.WithLabelValues("p", "queue_full")))
	if p.Total != 16 || p.Admitted != 14 || p.Succeeded != 14 || p.Refused429 != 2 || p.Refused503 != 0 || p.OtherFail != 0 {
		t.Errorf("pool p %+v, want 16 requests: 14 admitted and answered, 2 refused 429", p)
	}
	if p.Succeeded != okMetric || p.Refused429 != refused {
		t.Errorf("pool p: %d answered, %d refused; the metrics say %d, %d", p.Succeeded, p.Refused429, okMetric, refused)
	}
	if n := poolRow(t, s, "(none)"); n.Total != 3 || n.OtherFail != 3 {
		t.Errorf("early rejects %+v, want 3 failed", n)
	}
	var ups int64
	for _, r := range s.Groups {
		if r.Kind == "upstream" {
			ups += r.Succeeded
		}
	}
	if ups != 14 || s.Failures["queue_full"] != 2 || s.Done != 19 || s.Dropped != 0 {
		t.Errorf("upstreams answered %d (want 14), failures %v (want queue_full 2), done %d (want 19), dropped %d", ups, s.Failures, s.Done, s.Dropped)
	}
	if len(s.Stages) == 0 || s.Window.Succeeded != 14 {
		t.Errorf("window: %d answered (want 14), stages %v", s.Window.Succeeded, s.Stages)
	}
}

// liveSnapshotAfter publishes a snapshot of what was offered so far and
// reads it from the admin listener.
func liveSnapshotAfter(t *testing.T, g *Gateway, admin string) *live.Snapshot {
	t.Helper()
	g.Live.Step(int64(g.sinceBase()))
	return liveSnapshot(t, admin)
}

func poolRow(t *testing.T, s *live.Snapshot, name string) live.Group {
	t.Helper()
	for _, r := range s.Groups {
		if r.Kind == "pool" && r.Name == name {
			return r
		}
	}
	t.Fatalf("no pool %q in %+v", name, s.Groups)
	return live.Group{}
}

// TestLiveNeedsTheAdminListener: the live view is never on the data port.
func TestLiveNeedsTheAdminListener(t *testing.T) {
	for _, c := range []struct {
		rc   RunConfig
		want string
	}{
		{RunConfig{Live: true}, "live"},
		{RunConfig{Live: true, AdminAddr: "127.0.0.1:0", LiveWindow: -time.Second}, "live_window"},
		{RunConfig{Live: true, AdminAddr: "127.0.0.1:0"}, ""},
	} {
		err := c.rc.Validate()
		if (err == nil) != (c.want == "") || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %q", c.rc, err, c.want)
		}
	}
}
