// Command floor measures, side by side in one run, what a streaming proxy
// adds to an LLM stream: an exact-schedule upstream (first token 20 ms
// after the request, then one every 5 ms, 32 tokens) reached directly,
// through nginx (one worker, proxy_buffering off, upstream keep-alive),
// through the least a Go proxy costs (the standard library's
// httputil.ReverseProxy flushing every write, nothing measured) and
// through the tokentrace gateway (its quick-start configuration, every
// stage measured and exported), by one minimal streaming client, at each
// concurrency asked for. The paths take turns in short rounds (their order
// rotating), so a change in the machine's load falls on all of them.
//
//	go run ./bench/floor                       # 50 and 500 streams, 3,000 requests per path each
//	go run ./bench/floor -streams 50 -requests 600 -nginx ''   # quick, nginx wherever it is found
//
// It prints, per concurrency and path, TTFT P50/P99/P99.9, the TTFT added
// over the direct path at each, and the token-gap jitter (|gap between
// successive tokens at the client − the scheduled gap|) P50/P99/P99.9,
// with the load average before and after. nginx is skipped, with a note,
// where it is not installed (Debian: apt-get install nginx-light).
// docs/performance.md, "Side by side with nginx", holds its figures.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"time"
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
	Also []string
	Out  io.Writer
}

func main() {
	if spec := os.Getenv(goProxyEnv); spec != "" {
		os.Exit(runGoProxy(spec))
	}
	var cfg config
	var streams string
	flag.StringVar(&streams, "streams", "50,500", "concurrent streams, comma-separated: one table each")
	flag.IntVar(&cfg.Requests, "requests", 3000, "requests per path at each concurrency (after one warm-up round)")
	flag.IntVar(&cfg.PerRound, "per-round", 2, "requests each stream sends back to back in one path's turn")
	flag.DurationVar(&cfg.Sched.TTFT, "ttft", 20*time.Millisecond, "upstream: request → first token")
	flag.DurationVar(&cfg.Sched.Gap, "gap", 5*time.Millisecond, "upstream: time between tokens")
	flag.IntVar(&cfg.Sched.Tokens, "tokens", 32, "upstream: tokens per answer")
	flag.StringVar(&cfg.Tokentrace, "tokentrace", "", "tokentrace binary (default: go build ./cmd/tokentrace into a temporary folder)")
	flag.StringVar(&cfg.Nginx, "nginx", "", "nginx binary (default: nginx on PATH or /usr/sbin/nginx; - skips nginx)")
	flag.Func("also", "another gateway path beside the first: NAME=BINARY[,KEY=VALUE...] (environment settings for it); repeatable", func(v string) error {
		cfg.Also = append(cfg.Also, v)
		return nil
	})
	flag.Parse()
	var err error
	if cfg.Streams, err = parseInts(streams); err != nil {
		fmt.Fprintln(os.Stderr, "floor: -streams:", err)
		os.Exit(2)
	}
	cfg.Out = os.Stdout
	if err := runInterruptible(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
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
	name string
	addr string
	proc *proc // nil for direct
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
	up, err := startUpstream(cfg.Sched)
	if err != nil {
		return err
	}
	defer up.close()
	paths := []*path{{name: "direct", addr: up.addr()}}

	if cfg.Nginx != "-" {
		if bin, err := findNginx(cfg.Nginx); err != nil {
			fmt.Fprintf(cfg.Out, "nginx skipped: %v\n", err)
		} else if p, err := startNginx(ctx, bin, dir, up.addr()); err != nil {
			fmt.Fprintf(cfg.Out, "nginx skipped: %v\n", err)
		} else {
			defer p.stop()
			paths = append(paths, &path{name: "nginx", addr: p.addr, proc: p})
		}
	}
	if gp, err := startGoProxy(ctx, up.addr()); err != nil {
		return err
	} else {
		defer gp.stop()
		paths = append(paths, &path{name: "go-floor", addr: gp.addr, proc: gp})
	}
	bin := cfg.Tokentrace
	if bin == "" {
		if bin, err = buildTokentrace(ctx, dir); err != nil {
			return err
		}
	}
	gw, err := startGateway(ctx, bin, up.addr(), nil)
	if err != nil {
		return err
	}
	defer gw.stop()
	paths = append(paths, &path{name: "gateway", addr: gw.addr, proc: gw})
	fmt.Fprintf(cfg.Out, "upstream at %s; gateway at %s (its /metrics holds every stage)\n", up.addr(), gw.addr)
	for _, a := range cfg.Also {
		name, spec, ok := strings.Cut(a, "=")
		fields := strings.Split(spec, ",")
		if !ok || name == "" || fields[0] == "" {
			return fmt.Errorf("-also %q: want NAME=BINARY[,KEY=VALUE...]", a)
		}
		p, err := startGateway(ctx, fields[0], up.addr(), fields[1:])
		if err != nil {
			return fmt.Errorf("-also %s: %w", name, err)
		}
		defer p.stop() //nolint:gocritic // each path's process lives until run returns; -also lists a few at most
		paths = append(paths, &path{name: name, addr: p.addr, proc: p})
	}

	fmt.Fprintf(cfg.Out, "upstream: first token %v after the request, then one every %v, %d tokens; %d requests per path per concurrency\n",
		cfg.Sched.TTFT, cfg.Sched.Gap, cfg.Sched.Tokens, cfg.Requests)
	for _, n := range cfg.Streams {
		load0 := loadAverage()
		start := time.Now()
		res, err := measure(ctx, cfg, paths, n)
		if err != nil {
			return err
		}
		writeTable(cfg.Out, n, paths, res, cfg.Sched)
		fmt.Fprintf(cfg.Out, "load average before: %s, after: %s; %.1f s\n\n", load0, loadAverage(), time.Since(start).Seconds())
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
	}
	return res, nil
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
// excess over the direct path's at each quantile, and the jitter.
func writeTable(w io.Writer, n int, paths []*path, res []*result, s schedule) {
	ms := func(ns int64) string { return strconv.FormatFloat(float64(ns)/1e6, 'f', 2, 64) }
	fmt.Fprintf(w, "%d streams\n", n)
	fmt.Fprintf(w, "%-8s %8s %6s %-23s %-23s %-23s %s\n", "path", "requests", "errors",
		"TTFT P50/P99/P99.9 ms", "added P50/P99/P99.9 ms", "jitter P50/P99/P99.9 ms", "proxy CPU/token")
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
		cpu := "—"
		if p.proc != nil && r.tokens > 0 {
			cpu = fmt.Sprintf("%.1f µs", float64(r.cpu)/1e3/float64(r.tokens))
		}
		fmt.Fprintf(w, "%-8s %8d %6d %-23s %-23s %-23s %s\n", p.name, r.requests, r.errors,
			strings.Join(ttft, " / "), strings.Join(added, " / "), strings.Join(jit, " / "), cpu)
		if r.lastErr != nil {
			fmt.Fprintf(w, "  %s: last error: %v\n", p.name, r.lastErr)
			if p.proc != nil && p.proc.log.Len() > 0 {
				fmt.Fprintf(w, "  %s's log: %.400s\n", p.name, p.proc.log.String())
			}
		}
	}
}
