// Command floor measures, side by side in one run, what a streaming proxy
// adds to an LLM stream: an exact-schedule upstream (first token 20 ms
// after the request, then one every 5 ms, 32 tokens) reached directly,
// through nginx (one worker, proxy_buffering off, upstream keep-alive),
// through the least a Go proxy costs (the standard library's
// httputil.ReverseProxy flushing every write, nothing measured), through
// the least a Go proxy costs below net/http (the raw floor: a hand-written
// net.Conn HTTP/1.1 relay, rawproxy.go) and through the tokentrace
// gateway (its quick-start configuration, every stage measured and
// exported), by one minimal streaming client, at each
// concurrency asked for. The paths take turns in short rounds (their order
// rotating), so a change in the machine's load falls on all of them.
//
//	go run ./bench/floor                       # 50 and 500 streams, 3,000 requests per path each
//	go run ./bench/floor -streams 50 -requests 600 -serve-streams 0 -bench-runs 0   # quick: the proxies only
//	go run ./bench/floor -streams 0 -bench-runs 0   # serve's jitter checks only
//	go run ./bench/floor -streams 0 -bench-runs 0 -serve-streams 0   # serve under churn only
//	go run ./bench/floor -upstream-only 127.0.0.1:9400 -tokens 64   # the upstream alone, until Ctrl-C (bench's memory runs)
//
// It prints, per concurrency and path, TTFT P50/P99/P99.9, the TTFT added
// over the direct path at each, and the token-gap jitter (|gap between
// successive tokens at the client − the scheduled gap|) P50/P99/P99.9,
// the proxy's CPU (per token and in all) and the Go proxies' heap
// allocations per request, each gateway's stages (the mean per request of
// each, from its own /metrics), with the load average before and after
// and the gateway's targets against nginx judged. nginx is skipped, with a
// note, where it is not installed (Debian: apt-get install nginx-light).
// Then, so that one run gives every figure of the issue, serve's
// token-gap jitter against an exact-schedule server (-serve-streams, its
// BenchmarkStreams in windows), the same under churn (-churn-runs:
// closed-loop streams whose requests come and go at every step, its
// BenchmarkStreamsChurn run after run) and bench's TTFT error at warm streams
// (-bench-runs self-tests, then one at -bench-big streams), each judged
// against its target. docs/performance.md, "Side by side with nginx",
// holds its figures.
//
// Of this module it imports only internal/stats, internal/scrape,
// internal/latency and internal/process: it runs the gateway as the
// tokentrace binary, never in process.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tokentrace/tokentrace/internal/scrape"
)

// config is one run of the harness.
type config struct {
	Streams    []int // concurrency levels, each a table
	Requests   int   // requests per path per level (kept, after the warm-up round)
	PerRound   int   // requests each stream sends per round
	Sched      schedule
	Tokentrace string // the tokentrace binary ("": build it)
	Nginx      string // the nginx binary ("": look for it; "-": skip)
	// Also are more gateways to run beside the first, each
	// "NAME=BINARY[,KEY=VALUE...]" (a build to compare, or the same one
	// with other process settings).
	Also  []string
	Serve serveCheck // Streams 0: skipped
	Churn churnCheck // Runs 0: skipped
	Bench benchCheck // Runs 0: skipped
	Out   io.Writer
}

func main() {
	if spec := os.Getenv(goProxyEnv); spec != "" {
		os.Exit(runGoProxy(spec))
	}
	if spec := os.Getenv(rawProxyEnv); spec != "" {
		os.Exit(runRawProxy(spec))
	}
	var cfg config
	var streams string
	flag.StringVar(&streams, "streams", "50,500", "concurrent streams, comma-separated: one table each (0: no proxy tables, only serve's and bench's checks)")
	flag.IntVar(&cfg.Requests, "requests", 3000, "requests per path at each concurrency (after one warm-up round)")
	flag.IntVar(&cfg.PerRound, "per-round", 2, "requests each stream sends back to back in one path's turn")
	flag.DurationVar(&cfg.Sched.TTFT, "ttft", 20*time.Millisecond, "upstream: request → first token")
	flag.DurationVar(&cfg.Sched.Gap, "gap", 5*time.Millisecond, "upstream: time between tokens")
	flag.IntVar(&cfg.Sched.Tokens, "tokens", 32, "upstream: tokens per answer")
	flag.StringVar(&cfg.Tokentrace, "tokentrace", "", "tokentrace binary (default: go build ./cmd/tokentrace into a temporary folder)")
	flag.StringVar(&cfg.Nginx, "nginx", "", "nginx binary (default: nginx on PATH or /usr/sbin/nginx; - skips nginx)")
	flag.IntVar(&cfg.Serve.Streams, "serve-streams", 200, "serve's jitter check: concurrent streams (0 skips it)")
	flag.IntVar(&cfg.Serve.Windows, "serve-windows", 4, "serve's jitter check: measurement windows of 3 s")
	flag.DurationVar(&cfg.Serve.Step, "serve-step", 20*time.Millisecond, "serve's jitter check: engine step time")
	flag.IntVar(&cfg.Churn.Runs, "churn-runs", 10, "serve's jitter check under churn: runs, each against serve and the exact-schedule server (0 skips it)")
	flag.IntVar(&cfg.Churn.Streams, "churn-streams", 200, "serve's jitter check under churn: closed-loop streams")
	flag.IntVar(&cfg.Churn.Requests, "churn-requests", 1000, "serve's jitter check under churn: answers asked for in all")
	flag.IntVar(&cfg.Churn.Tokens, "churn-tokens", 32, "serve's jitter check under churn: tokens per answer")
	flag.IntVar(&cfg.Bench.Runs, "bench-runs", 10, "bench's TTFT-error check: self-test runs at -bench-streams (0 skips it)")
	flag.IntVar(&cfg.Bench.Streams, "bench-streams", 100, "bench's TTFT-error check: warm streams per run")
	flag.IntVar(&cfg.Bench.Big, "bench-big", 1000, "bench's TTFT-error check: streams of one more run (0: none)")
	upstreamOnly := flag.String("upstream-only", "", "serve only the exact-schedule upstream at this address (e.g. 127.0.0.1:9400, with -ttft, -gap, -tokens) until interrupted: bench's memory runs target it from their own process")
	flag.Func("also", "another gateway path beside the first: NAME=BINARY[,KEY=VALUE...] (environment settings for it); repeatable", func(v string) error {
		cfg.Also = append(cfg.Also, v)
		return nil
	})
	flag.Parse()
	var err error
	if streams != "0" {
		cfg.Streams, err = parseInts(streams)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor: -streams:", err)
		os.Exit(2)
	}
	cfg.Out = os.Stdout
	if *upstreamOnly != "" {
		err = serveUpstream(*upstreamOnly, cfg.Sched)
	} else {
		err = runInterruptible(cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}

// serveUpstream serves the exact-schedule upstream at addr until an
// interrupt.
func serveUpstream(addr string, s schedule) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	up, err := startUpstreamAt(addr, s)
	if err != nil {
		return err
	}
	fmt.Printf("upstream: http://%s, first token %v after the request, then one every %v, %d tokens\n", up.addr(), s.TTFT, s.Gap, s.Tokens)
	<-ctx.Done()
	up.close()
	return nil
}

// runInterruptible runs the harness until it ends or an interrupt stops it.
func runInterruptible(cfg config) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return run(ctx, cfg)
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive whole number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// path is one way from the client to the upstream.
type path struct {
	name    string
	addr    string
	proc    *proc  // nil for direct
	metrics string // its Prometheus /metrics with the Go runtime's counters ("": none)
}

func run(ctx context.Context, cfg config) error {
	if cfg.Requests < 1 || cfg.PerRound < 1 || cfg.Sched.Tokens < 2 || cfg.Sched.Gap <= 0 || cfg.Sched.TTFT < 0 {
		return fmt.Errorf("requests, per-round, gap must be positive, tokens at least 2, ttft not negative")
	}
	dir, err := os.MkdirTemp("", "tokentrace-floor-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if len(cfg.Streams) == 0 { // -streams 0: serve's and bench's checks only
		bin := cfg.Tokentrace
		if bin == "" && cfg.Bench.Runs > 0 {
			if bin, err = buildTokentrace(ctx, dir); err != nil {
				return err
			}
		}
		return runChecks(ctx, cfg, bin)
	}
	up, err := startUpstream(cfg.Sched)
	if err != nil {
		return err
	}
	defer up.close()
	bin := cfg.Tokentrace
	if bin == "" {
		if bin, err = buildTokentrace(ctx, dir); err != nil {
			return err
		}
	}
	paths, stop, err := startPaths(ctx, cfg, dir, bin, up.addr())
	defer stop()
	if err != nil {
		return err
	}
	fmt.Fprintf(cfg.Out, "upstream: first token %v after the request, then one every %v, %d tokens; %d requests per path per concurrency; %d CPUs\n",
		cfg.Sched.TTFT, cfg.Sched.Gap, cfg.Sched.Tokens, cfg.Requests, runtime.NumCPU())
	for _, n := range cfg.Streams {
		load0 := loadAverage()
		start := time.Now()
		res, err := measure(ctx, cfg, paths, n)
		if err != nil {
			return err
		}
		writeTable(cfg.Out, n, paths, res, cfg.Sched)
		fmt.Fprintf(cfg.Out, "load average before: %s, after: %s; %.1f s\n", load0, loadAverage(), time.Since(start).Seconds())
		writeStages(cfg.Out, paths, res)
		writeVerdicts(cfg.Out, paths, res, cfg.Sched)
		fmt.Fprintln(cfg.Out)
	}
	return runChecks(ctx, cfg, bin)
}

// startPaths starts every proxy in front of the upstream: nginx (where
// found), the Go floor, the gateway and the -also gateways; stop ends
// those started, also on error.
func startPaths(ctx context.Context, cfg config, dir, bin, upstream string) (paths []*path, stop func(), err error) {
	var procs []*proc
	stop = func() {
		for _, p := range procs {
			p.stop()
		}
	}
	add := func(name string, p *proc, metrics string) {
		procs = append(procs, p)
		paths = append(paths, &path{name: name, addr: p.addr, proc: p, metrics: metrics})
	}
	paths = []*path{{name: "direct", addr: upstream}}
	if cfg.Nginx != "-" {
		if nb, err := findNginx(cfg.Nginx); err != nil {
			fmt.Fprintf(cfg.Out, "nginx skipped: %v\n", err)
		} else if p, err := startNginx(ctx, nb, dir, upstream); err != nil {
			fmt.Fprintf(cfg.Out, "nginx skipped: %v\n", err)
		} else {
			add("nginx", p, "")
		}
	}
	gp, err := startGoProxy(ctx, upstream)
	if err != nil {
		return nil, stop, err
	}
	add("go-floor", gp, "http://"+gp.addr+goProxyMetrics)
	rp, err := startRawProxy(ctx, upstream)
	if err != nil {
		return nil, stop, err
	}
	add("raw-floor", rp, "http://"+rp.addr+rawProxyMetrics)
	gw, err := startGateway(ctx, bin, upstream, nil)
	if err != nil {
		return nil, stop, err
	}
	add("gateway", gw, "http://"+gw.addr+"/metrics")
	fmt.Fprintf(cfg.Out, "upstream at %s; gateway at %s (its /metrics holds every stage)\n", upstream, gw.addr)
	for _, a := range cfg.Also {
		name, spec, ok := strings.Cut(a, "=")
		fields := strings.Split(spec, ",")
		if !ok || name == "" || fields[0] == "" {
			return nil, stop, fmt.Errorf("-also %q: want NAME=BINARY[,KEY=VALUE...]", a)
		}
		p, err := startGateway(ctx, fields[0], upstream, fields[1:])
		if err != nil {
			return nil, stop, fmt.Errorf("-also %s: %w", name, err)
		}
		add(name, p, "http://"+p.addr+"/metrics")
	}
	return paths, stop, nil
}

// runChecks runs serve's checks (steady and under churn) and bench's,
// where asked for.
func runChecks(ctx context.Context, cfg config, bin string) error {
	serveOn := cfg.Serve.Streams > 0 && cfg.Serve.Windows > 0
	churnOn := cfg.Churn.Runs > 0 && cfg.Churn.Streams > 0
	if serveOn || churnOn {
		module, err := moduleDir(ctx)
		if err != nil {
			return err
		}
		if serveOn {
			if err := runServeCheck(ctx, cfg.Out, module, cfg.Serve); err != nil {
				return err
			}
		}
		if churnOn {
			if err := runChurnCheck(ctx, cfg.Out, module, cfg.Churn, cfg.Serve.Step); err != nil {
				return err
			}
		}
	}
	if cfg.Bench.Runs > 0 {
		return runBenchCheck(ctx, cfg.Out, bin, cfg.Bench)
	}
	return nil
}

// measure runs the paths' turns at n streams: one warm-up round, then
// rounds until each path has its requests, the paths' order rotating.
func measure(ctx context.Context, cfg config, paths []*path, n int) ([]*result, error) {
	body := fmt.Appendf(nil, `{"model":"floor","messages":[{"role":"user","content":"Say something."}],"max_tokens":%d,"stream":true}`, cfg.Sched.Tokens)
	conns := make([][]*stream, len(paths))
	for i, p := range paths {
		conns[i] = make([]*stream, n)
		for j := range conns[i] {
			conns[i][j] = newStream(p.addr, body)
		}
	}
	defer func() {
		for _, cs := range conns {
			for _, s := range cs {
				s.close()
			}
		}
	}()
	res := make([]*result, len(paths))
	for i := range res {
		res[i] = &result{}
	}
	perRound := n * cfg.PerRound
	rounds := 1 + (cfg.Requests+perRound-1)/perRound
	life := cfg.Sched.TTFT + time.Duration(cfg.Sched.Tokens)*cfg.Sched.Gap
	for r := range rounds {
		for k := range paths {
			i := (r + k) % len(paths)
			keep := res[i]
			if r == 0 {
				keep = &result{} // warm-up: connections opened, caches filled
			}
			cpu0 := paths[i].proc.cpu()
			turn(ctx, conns[i], keep, cfg, life)
			if r > 0 {
				keep.cpu += paths[i].proc.cpu() - cpu0
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		if r == 0 || r == rounds-1 {
			// The Go paths' allocations over the rounds kept: their
			// counters read once after the warm-up and once at the end.
			for i, p := range paths {
				res[i].mallocs[min(r, 1)], res[i].stages[min(r, 1)] = readMetrics(ctx, p.metrics)
			}
		}
	}
	return res, nil
}

// readMetrics reads a Go process's heap allocations so far
// (go_memstats_mallocs_total on its /metrics; −1 where it has none) and,
// for a gateway, its stage histograms (nil for another process).
func readMetrics(ctx context.Context, url string) (mallocs float64, stages stageTotals) {
	if url == "" {
		return -1, nil
	}
	f, err := scrape.Get(ctx, http.DefaultClient, url, nil)
	if err != nil {
		return -1, nil
	}
	mallocs = -1
	if v, ok := f.Sum("go_memstats_mallocs_total"); ok {
		mallocs = v
	}
	return mallocs, readStages(f)
}

// turn runs one path's round: n streams, started evenly over one
// answer's life (the steady state of n streams, not a burst), each
// sending PerRound requests back to back.
func turn(ctx context.Context, streams []*stream, res *result, cfg config, life time.Duration) {
	var wg sync.WaitGroup
	t0 := time.Now()
	for j, s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(t0.Add(life * time.Duration(j) / time.Duration(len(streams)))))
			var t timing
			for range cfg.PerRound {
				if ctx.Err() != nil {
					return
				}
				err := s.do(&t)
				res.record(&t, cfg.Sched.Gap, cfg.Sched.Tokens, err)
			}
		}()
	}
	wg.Wait()
}

// loadAverage is /proc/loadavg's three figures, or "n/a".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "n/a"
	}
	return strings.Join(f[:3], " ")
}

var quantiles = []float64{50, 99, 99.9}

// writeTable prints one concurrency's table: per path, TTFT and its
// excess over the direct path's at each quantile, the jitter, the proxy
// process's CPU (per token, and in all) and, for the Go proxies, their
// heap allocations per request.
func writeTable(w io.Writer, n int, paths []*path, res []*result, s schedule) {
	ms := func(ns int64) string { return strconv.FormatFloat(float64(ns)/1e6, 'f', 2, 64) }
	fmt.Fprintf(w, "%d streams\n", n)
	fmt.Fprintf(w, "%-9s %8s %6s %-23s %-23s %-23s %-10s %-7s %s\n", "path", "requests", "errors",
		"TTFT P50/P99/P99.9 ms", "added P50/P99/P99.9 ms", "jitter P50/P99/P99.9 ms", "CPU/token", "CPU s", "allocs/request")
	direct := res[0]
	for i, p := range paths {
		r := res[i]
		var ttft, added, jit []string
		for _, q := range quantiles {
			v := r.ttft.Percentile(q)
			ttft = append(ttft, ms(v))
			jit = append(jit, ms(r.jitter.Percentile(q)))
			if i == 0 {
				added = append(added, "—")
			} else {
				d := v - direct.ttft.Percentile(q)
				added = append(added, fmt.Sprintf("%+.2f", float64(d)/1e6))
			}
		}
		cpu, cpuS, allocs := "—", "—", "—"
		if p.proc != nil && r.tokens > 0 {
			cpu = fmt.Sprintf("%.1f µs", cpuPerToken(r))
			cpuS = fmt.Sprintf("%.2f", r.cpu.Seconds())
		}
		if a, ok := r.allocsPerRequest(); ok {
			allocs = fmt.Sprintf("%.0f", a)
		}
		fmt.Fprintf(w, "%-9s %8d %6d %-23s %-23s %-23s %-10s %-7s %s\n", p.name, r.requests, r.errors,
			strings.Join(ttft, " / "), strings.Join(added, " / "), strings.Join(jit, " / "), cpu, cpuS, allocs)
		if r.lastErr != nil {
			fmt.Fprintf(w, "  %s: last error: %v\n", p.name, r.lastErr)
			if p.proc != nil && p.proc.log.Len() > 0 {
				fmt.Fprintf(w, "  %s's log: %.400s\n", p.name, p.proc.log.String())
			}
		}
	}
}

// cpuPerToken is the proxy's CPU per token delivered, µs.
func cpuPerToken(r *result) float64 {
	return float64(r.cpu) / 1e3 / float64(max(r.tokens, 1))
}

// p50Slack is how far over nginx's added TTFT P50 the gateway's may be
// (issue 43), ms.
const p50Slack = 0.1

// writeVerdicts prints the gateway's targets against nginx in this run
// (added TTFT P50 ≤ nginx's + p50Slack, P99 ≤ nginx's, jitter P99 ≤
// nginx's + 0.5 ms) and
// its ratios to nginx and to the Go floor, with a warning where the
// direct path itself missed its schedule at P99 (the machine, not the
// proxies, then sets the tail).
func writeVerdicts(w io.Writer, paths []*path, res []*result, s schedule) {
	idx := map[string]int{}
	for i, p := range paths {
		idx[p.name] = i
	}
	gi, okG := idx["gateway"]
	ni, okN := idx["nginx"]
	if !okG || !okN {
		fmt.Fprintln(w, "targets: not judged (no nginx in this run)")
		return
	}
	d, g, n := res[0], res[gi], res[ni]
	added := func(r *result, q float64) float64 { return float64(r.ttft.Percentile(q)-d.ttft.Percentile(q)) / 1e6 }
	jit := func(r *result) float64 { return float64(r.jitter.Percentile(99)) / 1e6 }
	fmt.Fprintf(w, "target: gateway's added TTFT P50 ≤ nginx's + %.1f ms: %+.2f against %+.2f ms: %s\n", p50Slack, added(g, 50), added(n, 50), metWord(added(g, 50) <= added(n, 50)+p50Slack))
	fmt.Fprintf(w, "target: gateway's added TTFT P99 ≤ nginx's: %+.2f against %+.2f ms: %s\n", added(g, 99), added(n, 99), metWord(added(g, 99) <= added(n, 99)))
	fmt.Fprintf(w, "target: gateway's jitter P99 ≤ nginx's + 0.5 ms: %.2f against %.2f ms: %s\n", jit(g), jit(n), metWord(jit(g) <= jit(n)+0.5))
	line := fmt.Sprintf("CPU per token: gateway %.1f µs = %.2f × nginx's %.1f µs", cpuPerToken(g), cpuPerToken(g)/cpuPerToken(n), cpuPerToken(n))
	if fi, ok := idx["go-floor"]; ok {
		f := res[fi]
		line += fmt.Sprintf(", %.2f × the Go floor's %.1f µs; added TTFT P50 over the Go floor's %+.2f ms", cpuPerToken(g)/cpuPerToken(f), cpuPerToken(f), added(g, 50)-added(f, 50))
	}
	fmt.Fprintln(w, line)
	if ri, ok := idx["raw-floor"]; ok {
		f := res[ri]
		fmt.Fprintf(w, "raw floor (no net/http): added TTFT P50 %+.2f ms (nginx %+.2f), CPU per token %.1f µs = %.2f × nginx's; the gateway's added P50 over it %+.2f ms\n",
			added(f, 50), added(n, 50), cpuPerToken(f), cpuPerToken(f)/cpuPerToken(n), added(g, 50)-added(f, 50))
	}
	if p99 := time.Duration(d.ttft.Percentile(99)); p99 > s.TTFT+2*time.Millisecond {
		fmt.Fprintf(w, "warning: the direct path's own TTFT P99 is %.2f ms against a %v schedule: the machine, not the proxies, sets the P99s of this table\n", float64(p99)/1e6, s.TTFT)
	}
}
