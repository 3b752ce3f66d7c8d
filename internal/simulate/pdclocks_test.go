package simulate_test

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/bench"
	"github.com/tokentrace/tokentrace/internal/gateway/gatewaytest"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/racedetect"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/serve"
	"github.com/tokentrace/tokentrace/internal/simulate"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// pdStages are the P/D stages the two clocks are compared on.
var pdStages = []string{"prefill.prefill", "server.kv_transfer", "server.first_decode", "server.server_decode"}

// medians is each P/D stage's median over records, in ms.
func medians(tb testing.TB, recs []*latency.Record) map[string]float64 {
	tb.Helper()
	vals := map[string][]float64{}
	for _, r := range recs {
		if !r.OK() {
			tb.Fatalf("%s failed: %s", r.ID, r.Error)
		}
		for _, s := range r.Timing {
			k := string(s.Hop) + "." + s.Name
			vals[k] = append(vals[k], float64(s.NS)/1e6)
		}
	}
	out := map[string]float64{}
	for _, k := range pdStages {
		v := vals[k]
		if len(v) == 0 {
			tb.Fatalf("no %s in the records", k)
		}
		slices.Sort(v)
		out[k] = v[len(v)/2]
	}
	return out
}

// A 1P1D pair on two clocks: a closed loop of one worker through the
// gateway to a prefill-role and a decode-role serve, and the same
// deployment simulated. With one request at a time no queue forms, so
// each P/D stage's median is the performance model's on both clocks: the
// prefill, the transfer over the link, the first decode step and the
// decode agree within 2 % (a wall-clock step ends a little late on a busy
// machine; the transfer is the same figure on both).
func TestDisaggregatedTwoClocksAgree(t *testing.T) {
	if testing.Short() || racedetect.Enabled {
		t.Skip("serves a 1P1D pair for a few seconds")
	}
	const link, n = "rdma-400g", 12
	start := func(role string) *serve.Server {
		o := serve.DefaultOptions()
		o.Role, o.KVLink = role, link
		cfg, err := o.Config()
		if err != nil {
			t.Fatal(err)
		}
		s, err := serve.Start(context.Background(), cfg, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	p, d := start(serve.RolePrefill), start(serve.RoleDecode)
	url, _ := gatewaytest.Start(t, fmt.Sprintf("pools:\n  - {name: prefill, replicas: [{url: %q}]}\n  - {name: decode, replicas: [{url: %q}]}\n"+
		"routes:\n  - {model: \"*\", pool: decode, prefill_pool: prefill}\n", strings.TrimSuffix(p.URL(), "/v1"), strings.TrimSuffix(d.URL(), "/v1")))
	wl := &workload.Synthetic{Input: workload.Fixed(1000), Output: workload.Fixed(16), Turns: 1, Seed: 4}
	load := workload.Load{Concurrency: 1, Requests: n}
	dir := filepath.Join(t.TempDir(), "served")
	if _, err := bench.Run(context.Background(), bench.Config{
		Target: bench.Target{BaseURL: url, Endpoint: bench.EndpointCompletions, Model: "Llama-3.1-8B", Stream: true, IgnoreEOS: true,
			Timeout: time.Minute},
		Workload: wl, Load: load, OutDir: dir, Command: []string{"tokentrace", "bench", "(test)"}, SkipCalibration: true,
		ScrapeInterval: -1, Log: io.Discard,
	}, io.Discard); err != nil {
		t.Fatal(err)
	}
	recs, err := results.ReadRecords(filepath.Join(dir, results.RequestsFile))
	if err != nil {
		t.Fatal(err)
	}
	served := make([]*latency.Record, len(recs))
	for i := range recs {
		served[i] = &recs[i]
	}

	ec := d.Engine().Config()
	ec.KVLink, _ = perfmodel.LookupLink(link)
	var simulated []*latency.Record
	if _, err := simulate.Run(simulate.Config{Engine: ec, PrefillReplicas: 1, Replicas: 1, Workload: wl, Load: load, IgnoreEOS: true},
		func(r *latency.Record) { c := *r; simulated = append(simulated, &c) }); err != nil {
		t.Fatal(err)
	}
	ms, mw := medians(t, served), medians(t, simulated)
	for _, k := range pdStages {
		gap := (ms[k] - mw[k]) / mw[k]
		t.Logf("%-22s served %8.3f ms, simulated %8.3f ms (%+.2f %%)", k, ms[k], mw[k], 100*gap)
		if gap < -0.02 || gap > 0.02 {
			t.Errorf("%s: served median %.3f ms, simulated %.3f ms: %+.1f %%, beyond 2 %%", k, ms[k], mw[k], 100*gap)
		}
	}
}
