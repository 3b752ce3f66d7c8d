package gateway_test

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
	"github.com/tokentrace/tokentrace/internal/report"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/serve"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// startPD starts one prefill-role serve and decoders decode-role ones
// (Llama-3.1-8B on gpu, "" the default H100, the decode side pulling over
// link) and a gateway routing every model through them; it returns the
// gateway's URL and the first decode server.
func startPD(t *testing.T, gpu, link string, decoders int) (string, *serve.Server) {
	t.Helper()
	start := func(role string) *serve.Server {
		o := serve.DefaultOptions()
		o.Role, o.KVLink = role, link
		if gpu != "" {
			o.Engine.GPU = gpu
		}
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
	base := func(s *serve.Server) string { return fmt.Sprintf("{url: %q}", strings.TrimSuffix(s.URL(), "/v1")) }
	p := start(serve.RolePrefill)
	var ds []string
	var first *serve.Server
	for range decoders {
		d := start(serve.RoleDecode)
		if first == nil {
			first = d
		}
		ds = append(ds, base(d))
	}
	yaml := fmt.Sprintf(`pools:
  - name: prefill
    replicas: [%s]
  - name: decode
    replicas: [%s]
routes:
  - {model: "*", pool: decode, prefill_pool: prefill}
`, base(p), strings.Join(ds, ", "))
	url, _ := gatewaytest.Start(t, yaml)
	return url, first
}

// benchPD benches the gateway at url with n requests of input tokens at
// rate, streamed, 12 tokens out, asking for the server's evidence as
// metrics says (bench.ServerMetrics*, "" auto), into a results folder it
// returns.
func benchPD(t *testing.T, url string, n, input int, rate float64, metrics string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	cfg := bench.Config{
		Target: bench.Target{BaseURL: url, Endpoint: bench.EndpointCompletions, Model: "Llama-3.1-8B", Stream: true, IgnoreEOS: true,
			ContinuousUsage: true, Timeout: time.Minute, ServerMetrics: metrics},
		Workload: &workload.Synthetic{Input: workload.Fixed(input), Output: workload.Fixed(12), Turns: 1, Seed: 5},
		Load:     workload.Load{Rate: rate, Arrival: workload.Poisson, Requests: n, Seed: 2},
		OutDir:   dir, Command: []string{"tokentrace", "bench", "(test)"}, SkipCalibration: true,
		ScrapeInterval: -1, Log: io.Discard,
	}
	if _, err := bench.Run(context.Background(), cfg, io.Discard); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A 1P1D pair of serve behind the gateway, benched: every record carries
// the prefill instance's and the decode instance's hops, and the path's
// parts sum exactly to its E2E; each kv_transfer is the performance
// model's time for the prompt's full blocks over the link. With the
// engine's metrics object asked for too (return_metrics), the decode
// instance's Server-Timing is still its split: no second one is added.
func TestDisaggregatedPairBenched(t *testing.T) {
	if testing.Short() {
		t.Skip("runs serve, gateway and bench")
	}
	for _, metrics := range []string{bench.ServerMetricsAuto, bench.ServerMetricsTokentrace} {
		t.Run(metrics, func(t *testing.T) { pairBenched(t, metrics) })
	}
}

func pairBenched(t *testing.T, metrics string) {
	url, d := startPD(t, "", "rdma-400g", 1)
	const n = 30
	dir := benchPD(t, url, n, 500, 20, metrics)
	recs, err := results.ReadRecords(filepath.Join(dir, results.RequestsFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != n {
		t.Fatalf("%d records, want %d", len(recs), n)
	}
	link, _ := perfmodel.LookupLink("rdma-400g")
	ec := d.Engine().Config()
	want := []string{"prefill.prefill_queue", "prefill.prefill", "prefill.network",
		"server.kv_transfer", "server.decode_queue", "server.first_decode", "server.server_decode"}
	for _, r := range recs {
		if !r.OK() {
			t.Fatalf("request %s failed: %s %s", r.ID, r.ErrorKind, r.Error)
		}
		if !slices.ContainsFunc(r.Timing, func(s latency.HopStage) bool {
			return s.Hop == latency.HopGateway && s.Name == string(latency.TimingUpstreamPrefill)
		}) {
			t.Errorf("request %s: the gateway reported no upstream_prefill: %v", r.ID, r.Timing)
		}
		p, _ := r.Path()
		if p.Sum() != r.EndNS-r.IntendedNS {
			t.Errorf("request %s: parts sum to %d, E2E from intended is %d", r.ID, p.Sum(), r.EndNS-r.IntendedNS)
		}
		hops := []latency.Hop{latency.HopClient, latency.HopGateway, latency.HopPrefill, latency.HopServer}
		if !slices.Equal(p.Hops, hops) || len(p.Notes) > 0 {
			t.Errorf("request %s: hops %v, notes %q; want %v and none", r.ID, p.Hops, p.Notes, hops)
		}
		parts := map[string]int64{}
		for _, x := range p.Parts {
			parts[string(x.Hop)+"."+x.Name] = x.NS
		}
		for _, w := range want {
			if _, ok := parts[w]; !ok {
				t.Errorf("request %s: no part %s in %v", r.ID, w, p.Parts)
			}
		}
		full := r.InputTokens / ec.BlockSize * ec.BlockSize
		wantKV := link.Transfer(int64(full) * ec.KVBytesPerToken)
		if got := time.Duration(parts["server.kv_transfer"]); (got - wantKV).Abs() > time.Microsecond {
			t.Errorf("request %s: kv_transfer %v, want %v (%d tokens over %s)", r.ID, got, wantKV, full, link)
		}
	}
}

// The report names the P/D cause a deployment was built to show: a slow
// link (TCP) makes TTFT transfer-bound; one prefill instance for three
// decode instances under long prompts queues for the prefill pool. That
// pair runs on L4s, whose prefill is ≈ 8 times an H100's: the queue then
// outweighs what a loaded machine adds to every hop's HTTP and
// tokenizing (seconds under -race beside a CPU hog with 4000-token
// prompts on H100s), and the client's lag in sending.
func TestDisaggregatedReportNamesCauses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs serve, gateway, bench and report")
	}
	for _, tt := range []struct {
		name, gpu     string
		link          string
		decoders, n   int
		input         int
		rate          float64
		want, notWant string
	}{
		{"transfer-bound over tcp", "", "tcp", 1, 20, 2000, 2, report.RulePDTransfer, report.RulePDPrefillQueue},
		{"1P for 3D under long prompts", "L4", "rdma-400g", 3, 30, 1000, 30, report.RulePDPrefillQueue, report.RulePDTransfer},
	} {
		t.Run(tt.name, func(t *testing.T) {
			url, _ := startPD(t, tt.gpu, tt.link, tt.decoders)
			dir := benchPD(t, url, tt.n, tt.input, tt.rate, "")
			rep, err := report.Load(context.Background(), []string{dir}, report.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var rules []string
			for _, f := range rep.Findings {
				rules = append(rules, f.Rule)
				if f.Rule == tt.want {
					t.Logf("%s: %s", f.Title, f.Evidence)
				}
			}
			if !slices.Contains(rules, tt.want) || slices.Contains(rules, tt.notWant) {
				t.Errorf("findings %v; want %s and not %s", rules, tt.want, tt.notWant)
			}
		})
	}
}
