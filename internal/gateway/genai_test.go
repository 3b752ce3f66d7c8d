package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/tokentrace/tokentrace/internal/openaitest"
	"github.com/tokentrace/tokentrace/internal/scrape"
	"github.com/tokentrace/tokentrace/internal/tracing"
	"github.com/tokentrace/tokentrace/internal/tracing/otlptest"
)

// A gateway whose configuration names an OTLP endpoint exports the
// OpenTelemetry GenAI server metrics of its requests, with the
// conventions' names, units, bucket boundaries and attributes, when it
// stops; its /metrics carries their Prometheus translations with the same
// counts. gen_ai.request.model is the route's configured model (bounded
// cardinality), here m.
func TestGatewayExportsGenAIMetricsOverOTLP(t *testing.T) {
	rcv := otlptest.NewReceiver(t)
	up := openaitest.Start(t, &openaitest.Upstream{Name: "a", Chunks: 4, ContinuousUsage: true})
	path := filepath.Join(t.TempDir(), "gw.yaml")
	yaml := fmt.Sprintf("otlp_endpoint: %q\npools: [{name: p, replicas: [{url: %q}]}]\nroutes: [{model: m, pool: p}]\n", rcv.URL(), up.URL())
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrc, errc := make(chan net.Addr, 1), make(chan error, 1)
	go func() {
		errc <- run(ctx, RunConfig{ConfigPath: path, Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
			func(a net.Addr) { addrc <- a })
	}()
	var url string
	select {
	case a := <-addrc:
		url = "http://" + a.String()
	case err := <-errc:
		t.Fatal(err)
	}
	const n = 3
	for i := range n {
		if s, _, body := do(t, url, chatBody("m", true, fmt.Sprintf("hi %d", i), ""), nil); s != 200 {
			cancel()
			t.Fatalf("request %d: %d %s", i, s, body)
		}
	}
	fams, err := scrape.Get(context.Background(), http.DefaultClient, url+"/metrics", nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	cancel() // the gateway's shutdown flushes the meter
	if err := <-errc; err != nil {
		t.Fatalf("gateway: %v", err)
	}

	points, bad := rcv.Points()
	if len(bad) > 0 {
		t.Fatalf("receiver could not decode: %v", bad)
	}
	type seen struct {
		unit   string
		count  uint64
		bounds int
	}
	got := map[string]seen{}
	for _, p := range points {
		if p.Service != "tokentrace-gateway" {
			continue
		}
		key := p.Metric
		if tt, ok := p.Attrs[tracing.AttrTokenType]; ok {
			key += "/" + fmt.Sprint(tt)
		}
		if p.Attrs[tracing.AttrOperation] != "chat" || p.Attrs[tracing.AttrRequestModel] != "m" || p.Attrs[tracing.AttrProvider] != "tokentrace" {
			t.Errorf("%s: attributes %v", key, p.Attrs)
		}
		got[key] = seen{p.Unit, p.Count, len(p.Bounds)}
	}
	for _, w := range []struct {
		key, unit string
		name      string // the metric whose boundaries the conventions advise
	}{
		{tracing.MetricServerTTFT, "s", tracing.MetricServerTTFT},
		{tracing.MetricServerTPOT, "s", tracing.MetricServerTPOT},
		{tracing.MetricServerDuration, "s", tracing.MetricServerDuration},
		{tracing.MetricTokenUsage + "/input", "{token}", tracing.MetricTokenUsage},
		{tracing.MetricTokenUsage + "/output", "{token}", tracing.MetricTokenUsage},
	} {
		g := got[w.key]
		if g.unit != w.unit || g.count != n || g.bounds != len(tracing.GenAIBounds(w.name)) {
			t.Errorf("%s: unit %q, %d points, %d bounds; want %q, %d, %d (received %v)",
				w.key, g.unit, g.count, g.bounds, w.unit, n, len(tracing.GenAIBounds(w.name)), got)
		}
	}
	// The same requests under the Prometheus names on /metrics.
	counts := map[string]uint64{}
	for _, name := range []string{
		tracing.PromName(tracing.MetricServerTTFT, tracing.UnitSeconds),
		tracing.PromName(tracing.MetricServerTPOT, tracing.UnitSeconds),
		tracing.PromName(tracing.MetricServerDuration, tracing.UnitSeconds),
		tracing.PromName(tracing.MetricTokenUsage, tracing.UnitTokens),
	} {
		mf := fams[name]
		if mf == nil {
			t.Errorf("/metrics lacks %s", name)
			continue
		}
		for _, m := range mf.GetMetric() {
			key := name
			for _, l := range m.GetLabel() {
				if l.GetName() == tracing.PromLabel(tracing.AttrTokenType) {
					key += "/" + l.GetValue()
				}
			}
			counts[key] += m.GetHistogram().GetSampleCount()
		}
	}
	want := map[string]uint64{"gen_ai_server_time_to_first_token_seconds": n, "gen_ai_server_time_per_output_token_seconds": n,
		"gen_ai_server_request_duration_seconds": n, "gen_ai_client_token_usage/input": n, "gen_ai_client_token_usage/output": n}
	if diff := cmp.Diff(want, counts); diff != "" {
		t.Errorf("/metrics' GenAI histograms' counts (-want +got):\n%s", diff)
	}
}
