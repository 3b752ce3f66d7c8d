package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/tokentrace/tokentrace/internal/bench"
	"github.com/tokentrace/tokentrace/internal/engine"
	"github.com/tokentrace/tokentrace/internal/gateway"
	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/process"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/scrape"
	"github.com/tokentrace/tokentrace/internal/serve"
	"github.com/tokentrace/tokentrace/internal/stats"
	"github.com/tokentrace/tokentrace/internal/workload"
)

const simModel = "sim-model"

// TestDashboardsAndRulesAgainstRealPrometheus runs a real Prometheus with
// the shipped scrape configuration (targets rewritten to this test's
// ports, 1 s scrape and rule evaluation) and rules against tokentrace
// serve and gateway in process, under three bench loads through the
// gateway:
//
//  1. short prompts: the TTFT P99 that the dashboards' P99 query computes
//     over the load, for serve and for the gateway, must fall in the
//     histogram bucket of bench's own P99 or a neighbouring one;
//  2. long prompts (TTFT over the rules' 0.5 s threshold): the TTFT SLO
//     burns;
//  3. requests the server fails with 500 (its fault header): the
//     availability SLO burns.
//
// The recorded SLIs must equal the shares of the counts they are computed
// from: the availability SLI bench's failed requests, the TTFT SLI the
// slow first tokens each job's histogram observed, which must lie
// between the counts bench's records give (the engine's queue + prefill
// and the client's TTFT over the threshold). Then
// every PromQL expression of the dashboards (panels and variables)
// and of the rules is evaluated through Prometheus's HTTP API and must
// return data, and every alert must be pending or firing for both jobs.
func TestDashboardsAndRulesAgainstRealPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Prometheus, serve and gateway")
	}
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not on PATH (Debian: apt-get install prometheus; .ci/run installs it): the dashboards' and rules' queries are not run against a real Prometheus here")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	srv := startServe(t)
	gwAddr := startGatewayProcess(t, ctx, strings.TrimSuffix(srv.URL(), "/v1"))
	prom := startPrometheus(t, ctx, promBin, srv.Addr().String(), gwAddr)
	for _, job := range []string{"tokentrace-serve", "tokentrace-gateway"} {
		prom.waitFor(ctx, t, fmt.Sprintf("Prometheus to scrape %s", job), func() (bool, error) {
			v, err := prom.scalar(ctx, fmt.Sprintf(`up{job=%q}`, job), time.Now())
			return v == 1, err
		})
	}
	// Every series exists at zero now (serve's from its start, the
	// gateway's from its configuration) and has been scraped: the windows
	// below start before the load, so increase() counts every request.
	t0 := time.Now().Add(-2 * time.Second)
	gwURL := "http://" + gwAddr

	// 1. Short prompts: compare the TTFT P99s.
	short := &workload.Synthetic{Chat: true, Input: workload.Fixed(64), Output: workload.Fixed(16),
		PrefixTokens: 32, PrefixGroups: 2, Turns: 1, Seed: 1}
	res := runBench(t, ctx, gwURL, nil, short, workload.Load{Rate: 25, Arrival: workload.Poisson, Requests: 50, Seed: 1})
	ttft := dist(t, res, latency.TTFT)
	// serve exposes the GenAI histograms too (beside vLLM's names): the
	// gateway's are selected by job.
	for _, m := range []string{"vllm:time_to_first_token_seconds_count", `gen_ai_server_time_to_first_token_seconds_count{job="tokentrace-gateway"}`} {
		prom.waitFor(ctx, t, fmt.Sprintf("sum(%s) to reach bench's %d first tokens", m, ttft.Count), func() (bool, error) {
			v, err := prom.scalar(ctx, "sum("+m+")", time.Now())
			return v == float64(ttft.Count), err
		})
	}
	tq := time.Now()
	window := promDuration(tq.Sub(t0))
	engineTTFTP99 := engineTTFT(t, res)
	for _, c := range []struct{ dashboard, bucket string }{
		{"tokentrace-serve.json", "vllm:time_to_first_token_seconds_bucket"},
		{"tokentrace-gateway.json", "gen_ai_server_time_to_first_token_seconds_bucket"},
	} {
		expr := p99Query(t, filepath.Join(dashboardsDir, c.dashboard), window)
		got, err := prom.scalar(ctx, expr, tq)
		if err != nil {
			t.Fatalf("%s: %v", c.dashboard, err)
		}
		bounds := prom.bucketBounds(ctx, t, c.bucket, tq)
		// Each request's TTFT as serve or the gateway stamps it lies
		// between the engine's own queue + prefill (the server's split in
		// bench's record) and the client's TTFT, so its P99 lies between
		// their P99s: one value on a quiet machine, apart by the client's
		// and the proxy's delays on a busy one.
		lo, _ := neighbourhood(bounds, engineTTFTP99)
		_, hi := neighbourhood(bounds, ttft.P99/1e3)
		t.Logf("%s: TTFT P99 from Prometheus %.4fs, bench %.4fs (engine's queue + prefill %.4fs) over %d requests (accepted [%g, %g])",
			c.dashboard, got, ttft.P99/1e3, engineTTFTP99, ttft.Count, lo, hi)
		if !(got >= lo && got <= hi) {
			t.Errorf("%s: the dashboard's TTFT P99 %.4fs is not within a bucket of bench's %.4fs and the engine's %.4fs (buckets %v)\n%s",
				c.dashboard, got, ttft.P99/1e3, engineTTFTP99, bounds, expr)
		}
	}

	// 2. Long prompts: first tokens after the rules' threshold.
	long := &workload.Synthetic{Chat: true, Input: workload.Fixed(16000), Output: workload.Fixed(4), Turns: 1, Seed: 2}
	res2 := runBench(t, ctx, gwURL, nil, long, workload.Load{Rate: 1.2, Arrival: workload.Constant, Requests: 14, Seed: 2})
	n := ttft.Count + dist(t, res2, latency.TTFT).Count
	prom.waitFor(ctx, t, "the long prompts' first tokens to be scraped", func() (bool, error) {
		v, err := prom.scalar(ctx, `sum(gen_ai_server_time_to_first_token_seconds_count{job="tokentrace-gateway"})`, time.Now())
		return v == float64(n), err
	})

	// 3. Server errors, forced by serve's fault header (forwarded by the
	// gateway).
	hdr := http.Header{serve.FaultHeader: []string{"500"}}
	res3 := runBench(t, ctx, gwURL, hdr, short, workload.Load{Rate: 20, Arrival: workload.Constant, Requests: 15, Seed: 3})
	if res3.Report.Summary.Failed != 15 {
		t.Fatalf("%d of 15 requests with the 500 fault failed", res3.Report.Summary.Failed)
	}
	prom.waitFor(ctx, t, "the server errors to be scraped", func() (bool, error) {
		v, err := prom.scalar(ctx, `sum(tokentrace_gateway_requests_total{code=~"5.."}) + sum(tokentrace:http_errors_total{code="500"})`, time.Now())
		return v >= 30, err
	})
	alerts := alertNames(t)
	prom.waitFor(ctx, t, "every alert to be pending or firing for both jobs", func() (bool, error) {
		active, err := prom.activeAlerts(ctx)
		if err != nil {
			return false, err
		}
		var missing []string
		for _, a := range alerts {
			for _, job := range []string{"tokentrace-serve", "tokentrace-gateway"} {
				if !active[[2]string{a, job}] {
					missing = append(missing, a+"/"+job)
				}
			}
		}
		if len(missing) > 0 {
			ratios, _ := prom.query(ctx, `{__name__=~"tokentrace:.*_errors:ratio_rate.*"}`, time.Now())
			return false, fmt.Errorf("not active: %v; error ratios: %v", missing, ratios)
		}
		return true, nil
	})

	// The SLIs, by hand, over the whole run (the 1 h window). The TTFT
	// SLI's rule counts the first tokens each job's own histogram saw
	// after the 0.5 s threshold, so its expected value is read off the
	// same histograms (each job's /metrics, after the load): the rule's
	// arithmetic is then checked exactly whatever the machine's load. The
	// client's own TTFTs cannot give it: on a loaded host the client's
	// first-token stamps come later than the servers' (host delay), and
	// short prompts the servers answered in milliseconds counted as slow
	// (0.406 expected against the rule's 0.219 beside two CPU hogs). They
	// bound it instead, request by request: the engine's queue + prefill
	// (Server-Timing) ≤ serve's TTFT ≤ the gateway's ≤ the client's, so
	// each job's slow count lies between the records' two counts.
	var slowEngine, slowClient, firsts, failed, requests int
	for _, r := range []*bench.Result{res, res2, res3} {
		for _, rec := range readRecords(t, r) {
			requests++
			if !rec.OK() {
				failed++
			}
			if d, ok := rec.TTFT(); ok {
				firsts++
				if d > sloTTFT {
					slowClient++
				}
				if rec.Server != nil && time.Duration(rec.Server.QueueNS+rec.Server.PrefillNS) > sloTTFT {
					slowEngine++
				}
			}
		}
	}
	// The gateway also counts what bench asked it besides the records'
	// requests: the tokenizer probes it passes through to the engine (one
	// or two per run), none of them a 5xx. Their series start mid-run, so
	// rate() extrapolates them apart from the rest: the gateway's ratio
	// lies between the errors over every request it counted and over the
	// records' requests.
	gwRequests := counterSum(ctx, t, gwURL, "tokentrace_gateway_requests_total")
	if gwRequests < requests || gwRequests > requests+6 {
		t.Errorf("the gateway counted %d requests; bench made %d and at most 2 probes in each of its 3 runs", gwRequests, requests)
	}
	wants := map[string]map[string]float64{
		"tokentrace:availability_errors:ratio_rate1h": {
			"tokentrace-serve": float64(failed) / float64(requests), "tokentrace-gateway": float64(failed) / float64(gwRequests)},
		"tokentrace:ttft_slo_errors:ratio_rate1h": {},
	}
	for _, j := range []struct{ job, base, hist string }{
		{"tokentrace-serve", "http://" + srv.Addr().String(), "vllm:time_to_first_token_seconds"},
		{"tokentrace-gateway", gwURL, "gen_ai_server_time_to_first_token_seconds"},
	} {
		slow, n := slowFirstTokens(ctx, t, j.base, j.hist)
		t.Logf("%s: %d of %d first tokens after %v by its %s (the engine's queue + prefill: %d, the client: %d)",
			j.job, slow, n, sloTTFT, j.hist, slowEngine, slowClient)
		if n != firsts {
			t.Errorf("%s: %s counted %d first tokens, bench received %d", j.job, j.hist, n, firsts)
		}
		if slow < slowEngine || slow > slowClient {
			t.Errorf("%s: %d first tokens after %v by its %s, not between the engine's %d and the client's %d",
				j.job, slow, sloTTFT, j.hist, slowEngine, slowClient)
		}
		wants["tokentrace:ttft_slo_errors:ratio_rate1h"][j.job] = float64(slow) / float64(n)
	}
	for _, record := range []string{"tokentrace:ttft_slo_errors:ratio_rate1h", "tokentrace:availability_errors:ratio_rate1h"} {
		for _, job := range []string{"tokentrace-serve", "tokentrace-gateway"} {
			want := wants[record][job]
			lo, hi := want-1e-9, want+1e-9
			if record == "tokentrace:availability_errors:ratio_rate1h" && job == "tokentrace-gateway" {
				hi = float64(failed)/float64(requests) + 1e-9
			}
			q := fmt.Sprintf("%s{job=%q}", record, job)
			prom.waitFor(ctx, t, fmt.Sprintf("%s to be within [%.6f, %.6f]", q, lo, hi), func() (bool, error) {
				v, err := prom.scalar(ctx, q, time.Now())
				if err == nil && (v < lo || v > hi) {
					err = fmt.Errorf("%s = %.6f", q, v)
				}
				return err == nil, err
			})
		}
	}

	tq = time.Now()
	window = promDuration(tq.Sub(t0))
	vars := dashboardVars(t)
	dq, rq := dashboardQueries(t), ruleQueries(t)
	queries := slices.Concat(dq, rq)
	for _, q := range queries {
		expr := substitute(q.expr, vars, window)
		r, err := prom.query(ctx, expr, tq)
		if err != nil {
			t.Errorf("%s: %v\n%s", q.where, err, expr)
			continue
		}
		if len(r) == 0 {
			t.Errorf("%s: no data\n%s", q.where, expr)
		}
	}
	t.Logf("%d expressions evaluated: %d from the dashboards, %d from the rules", len(queries), len(dq), len(rq))
	prom.checkRuleHealth(ctx, t)
}

// startServe runs tokentrace serve in process. Each engine step takes 3 ms
// plus 50 µs per token it processes, so a 16,000-token prompt (two chunks
// of at most 8,192) takes about 0.8 s to its first token and a short one a
// few milliseconds.
func startServe(t *testing.T) *serve.Server {
	t.Helper()
	step := engine.StepTimerFunc(func(b *perfmodel.Batch) time.Duration {
		n := 0
		for _, s := range b.Seqs {
			n += s.NewTokens
		}
		return 3*time.Millisecond + time.Duration(n)*50*time.Microsecond
	})
	s, err := serve.Start(context.Background(), serve.Config{Engine: engine.Config{
		Model: simModel, StepTimer: step, BlockSize: 16, NumBlocks: 16384, MaxModelLen: 20000,
		MaxNumSeqs: 64, MaxNumBatchedTokens: 8192, EnablePrefixCaching: true, Seed: 1,
	}}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// startGatewayProcess runs the gateway as `tokentrace gateway --upstream`
// does, on a loopback port, until the test ends, and returns its address.
func startGatewayProcess(t *testing.T, ctx context.Context, upstream string) string {
	t.Helper()
	gs, err := gateway.NewServer(gateway.RunConfig{Upstreams: []string{upstream},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Grace: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(gctx, ln) }()
	t.Cleanup(func() {
		stop()
		if err := <-errc; err != nil {
			t.Errorf("gateway: %v", err)
		}
	})
	return ln.Addr().String()
}

func runBench(t *testing.T, ctx context.Context, base string, hdr http.Header, src workload.Source, load workload.Load) *bench.Result {
	t.Helper()
	res, err := bench.Run(ctx, bench.Config{
		Target: bench.Target{BaseURL: base, Endpoint: bench.EndpointChat, Model: simModel, Headers: hdr,
			Stream: true, IgnoreEOS: true, ContinuousUsage: true, Timeout: time.Minute},
		Workload: src, Load: load, OutDir: filepath.Join(t.TempDir(), "run"),
		Command: []string{"tokentrace", "bench", "(deploy test)"}, SkipCalibration: true, Grace: 30 * time.Second,
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// engineTTFT is the P99, in seconds, of the run's queue + prefill as the
// engine reported them (Server-Timing): a lower bound, request by request,
// of the TTFT that serve and the gateway stamp.
func engineTTFT(t *testing.T, res *bench.Result) float64 {
	t.Helper()
	var v []time.Duration
	for _, r := range readRecords(t, res) {
		if _, ok := r.TTFT(); ok && r.Server != nil {
			v = append(v, time.Duration(r.Server.QueueNS+r.Server.PrefillNS))
		}
	}
	if len(v) == 0 {
		t.Fatal("no record carries the server's split")
	}
	slices.Sort(v)
	return stats.Percentile(v, 99).Seconds()
}

// sloTTFT is the threshold of the rules' TTFT SLI (le="0.5").
const sloTTFT = 500 * time.Millisecond

// slowFirstTokens reads a job's TTFT histogram off its /metrics as the
// TTFT SLI's rule reads it: the first tokens it observed (its count, over
// every series) and those after sloTTFT (the count less the le="0.5"
// bucket).
// counterSum is the sum of a counter's series on base's /metrics.
func counterSum(ctx context.Context, t *testing.T, base, name string) int {
	t.Helper()
	fams, err := scrape.Get(ctx, http.DefaultClient, base+"/metrics", nil)
	if err != nil {
		t.Fatalf("%s: %v", base, err)
	}
	sum := 0.0
	if fam := fams[name]; fam != nil {
		for _, m := range fam.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return int(sum)
}

func slowFirstTokens(ctx context.Context, t *testing.T, base, hist string) (slow, firsts int) {
	t.Helper()
	fams, err := scrape.Get(ctx, http.DefaultClient, base+"/metrics", nil)
	if err != nil {
		t.Fatalf("%s: %v", base, err)
	}
	fam := fams[hist]
	if fam == nil {
		t.Fatalf("%s/metrics has no %s", base, hist)
	}
	within := 0
	for _, m := range fam.GetMetric() {
		h := m.GetHistogram()
		if h == nil {
			t.Fatalf("%s/metrics: %s is no histogram", base, hist)
		}
		firsts += int(h.GetSampleCount())
		found := false
		for _, b := range h.GetBucket() {
			if b.GetUpperBound() == sloTTFT.Seconds() {
				within += int(b.GetCumulativeCount())
				found = true
			}
		}
		if !found {
			t.Fatalf("%s/metrics: %s has no le=\"%g\" bucket, which the rules read", base, hist, sloTTFT.Seconds())
		}
	}
	return firsts - within, firsts
}

// readRecords reads a bench run's requests.jsonl.
func readRecords(t *testing.T, res *bench.Result) []latency.Record {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(res.OutDir, results.RequestsFile))
	if err != nil {
		t.Fatal(err)
	}
	var recs []latency.Record
	for _, line := range bytes.Split(bytes.TrimSpace(raw), []byte("\n")) {
		var r latency.Record
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	return recs
}

func dist(t *testing.T, res *bench.Result, m latency.Metric) reportDist {
	t.Helper()
	for _, d := range res.Report.Metrics {
		if d.Metric == string(m) {
			return reportDist{Count: d.Count, P99: d.P99}
		}
	}
	t.Fatalf("bench reported no %s", m)
	return reportDist{}
}

// reportDist is what the test reads of a bench distribution: its count
// and P99 in milliseconds.
type reportDist struct {
	Count int64
	P99   float64
}

// neighbourhood returns the bounds that a histogram quantile may take when
// the exact value is v: the bucket holding v and one bucket either side.
// One bucket of slack is the resolution: histogram_quantile ranks by
// 0.99·n and interpolates linearly inside the bucket, bench ranks the
// exact values, and the gateway and serve stamp the first token a little
// before the client does, so a value near a bound may sit across it.
func neighbourhood(bounds []float64, v float64) (lo, hi float64) {
	k := sort.SearchFloat64s(bounds, v) // bounds[k-1] < v ≤ bounds[k]
	if k-2 >= 0 {
		lo = bounds[k-2]
	}
	hi = math.Inf(1)
	if k+1 < len(bounds) {
		hi = bounds[k+1]
	}
	return lo, hi
}

// p99Query returns the dashboard's TTFT P99 query (the panel "TTFT",
// legend P99) with its rate interval set to window.
func p99Query(t *testing.T, path, window string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr         string `json:"expr"`
				LegendFormat string `json:"legendFormat"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if p.Title == "TTFT" && tg.LegendFormat == "P99" {
				return substitute(tg.Expr, dashboardVars(t), window)
			}
		}
	}
	t.Fatalf("%s: no TTFT panel with a P99 target", path)
	return ""
}

// dashboardVars gives every dashboard variable the value the test
// evaluates with: a query variable all its values (".*", its allValue),
// a custom one its default.
func dashboardVars(t *testing.T) map[string]string {
	t.Helper()
	vars := map[string]string{}
	for _, f := range dashboardFiles(t) {
		for _, v := range readDashboard(t, f).Templating.List {
			switch v.Type {
			case "query":
				vars[v.Name] = ".*"
			case "custom":
				s, ok := v.Current.Value.(string)
				if !ok {
					t.Fatalf("%s: custom variable %s has no single default value", f, v.Name)
				}
				vars[v.Name] = s
			}
		}
	}
	return vars
}

// substitute replaces Grafana's variables in expr: the rate interval and
// range by window, the dashboard's variables by vars.
func substitute(expr string, vars map[string]string, window string) string {
	return varRef.ReplaceAllStringFunc(expr, func(ref string) string {
		name := strings.Trim(ref, "${}")
		switch name {
		case "__rate_interval", "__interval", "__range":
			return window
		}
		if v, ok := vars[name]; ok {
			return v
		}
		return ref
	})
}

// promDuration is d rounded up to whole seconds, in PromQL's syntax.
func promDuration(d time.Duration) string {
	return strconv.Itoa(int(math.Ceil(d.Seconds()))) + "s"
}

func alertNames(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				names = append(names, r.Alert)
			}
		}
	}
	return names
}

// promServer is a Prometheus this test started.
type promServer struct {
	base string
	logs *lockedBuffer
}

// lockedBuffer is a log sink safe to read while a child writes.
type lockedBuffer = process.Log

// startPrometheus writes a configuration derived from the shipped one —
// targets rewritten, scrape and evaluation every second, the shipped rules
// file — and runs prometheus on a loopback port until the test ends.
func startPrometheus(t *testing.T, ctx context.Context, bin, serveAddr, gwAddr string) *promServer {
	t.Helper()
	dir := t.TempDir()
	cfg := testPromConfig(t, map[string]string{"tokentrace-serve": serveAddr, "tokentrace-gateway": gwAddr})
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	pctx, stop := context.WithCancel(ctx)
	cmd := exec.CommandContext(pctx, bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 15 * time.Second
	if err := process.StartCmd(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", logs.String())
		}
	})
	p := &promServer{base: "http://" + addr, logs: logs}
	p.waitFor(ctx, t, "Prometheus to be ready", func() (bool, error) {
		resp, err := http.Get(p.base + "/-/ready")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == 200, nil
	})
	return p
}

// testPromConfig is the shipped prometheus.yml with each job's targets
// replaced, 1 s intervals and the rules file's absolute path. A job the
// test does not know fails it, so that a job added to the shipped file is
// added here too.
func testPromConfig(t *testing.T, targets map[string]string) []byte {
	t.Helper()
	raw, err := os.ReadFile(promConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("%s: %v", promConfigFile, err)
	}
	cfg["global"] = map[string]any{"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
	rules, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg["rule_files"] = []string{rules}
	jobs, _ := cfg["scrape_configs"].([]any)
	var seen []string
	for _, j := range jobs {
		job, _ := j.(map[string]any)
		name, _ := job["job_name"].(string)
		addr, ok := targets[name]
		if !ok {
			t.Fatalf("%s: job %q: the test has no target for it", promConfigFile, name)
		}
		job["static_configs"] = []any{map[string]any{"targets": []string{addr}}}
		seen = append(seen, name)
	}
	for name := range targets {
		if !slices.Contains(seen, name) {
			t.Fatalf("%s: no job %q", promConfigFile, name)
		}
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitFor polls cond every 200 ms until it holds, failing the test after
// a minute (Prometheus scrapes and evaluates every second).
func (p *promServer) waitFor(ctx context.Context, t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var lastErr error
	for {
		ok, err := cond()
		if ok {
			return
		}
		lastErr = err
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("timed out waiting for %s (last error: %v)", what, lastErr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// get calls a Prometheus API path and decodes its data.
func (p *promServer) get(ctx context.Context, path string, params url.Values, data any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+path+"?"+params.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status    string          `json:"status"`
		Data      json.RawMessage `json:"data"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("%s: status %d: %w", path, resp.StatusCode, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("%s: %s: %s", path, body.ErrorType, body.Error)
	}
	return json.Unmarshal(body.Data, data)
}

// query evaluates expr at instant at (/api/v1/query) and returns its
// samples; a scalar or string result counts as one sample.
func (p *promServer) query(ctx context.Context, expr string, at time.Time) ([]promSample, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	params := url.Values{"query": {expr}, "time": {strconv.FormatFloat(float64(at.UnixNano())/1e9, 'f', 3, 64)}}
	if err := p.get(ctx, "/api/v1/query", params, &data); err != nil {
		return nil, err
	}
	switch data.ResultType {
	case "vector":
		var s []promSample
		err := json.Unmarshal(data.Result, &s)
		return s, err
	case "scalar", "string":
		var v [2]any
		err := json.Unmarshal(data.Result, &v)
		return []promSample{{Value: v}}, err
	}
	return nil, fmt.Errorf("result type %q", data.ResultType)
}

// scalar evaluates expr, which must give one sample, and returns its value.
func (p *promServer) scalar(ctx context.Context, expr string, at time.Time) (float64, error) {
	s, err := p.query(ctx, expr, at)
	if err != nil {
		return 0, err
	}
	if len(s) != 1 {
		return 0, fmt.Errorf("%s: %d samples, want 1", expr, len(s))
	}
	str, _ := s[0].Value[1].(string)
	return strconv.ParseFloat(str, 64)
}

// bucketBounds returns the finite upper bounds of a scraped histogram.
func (p *promServer) bucketBounds(ctx context.Context, t *testing.T, bucket string, at time.Time) []float64 {
	t.Helper()
	s, err := p.query(ctx, "count by (le) ("+bucket+")", at)
	if err != nil {
		t.Fatal(err)
	}
	var bounds []float64
	for _, x := range s {
		v, err := strconv.ParseFloat(x.Metric["le"], 64)
		if err != nil {
			t.Fatalf("%s: le %q: %v", bucket, x.Metric["le"], err)
		}
		if !math.IsInf(v, 1) {
			bounds = append(bounds, v)
		}
	}
	sort.Float64s(bounds)
	return bounds
}

// activeAlerts returns the (alert name, job) pairs pending or firing.
func (p *promServer) activeAlerts(ctx context.Context) (map[[2]string]bool, error) {
	var data struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := p.get(ctx, "/api/v1/alerts", nil, &data); err != nil {
		return nil, err
	}
	active := map[[2]string]bool{}
	for _, a := range data.Alerts {
		if a.State == "pending" || a.State == "firing" {
			active[[2]string{a.Labels["alertname"], a.Labels["job"]}] = true
		}
	}
	return active, nil
}

// checkRuleHealth fails on a rule Prometheus could not evaluate.
func (p *promServer) checkRuleHealth(ctx context.Context, t *testing.T) {
	t.Helper()
	var data struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Name      string `json:"name"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := p.get(ctx, "/api/v1/rules", nil, &data); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			n++
			if r.Health != "ok" {
				t.Errorf("rule %s/%s: health %q: %s", g.Name, r.Name, r.Health, r.LastError)
			}
		}
	}
	if want := len(ruleQueries(t)); n != want {
		t.Errorf("Prometheus loaded %d rules, the file has %d", n, want)
	}
}
