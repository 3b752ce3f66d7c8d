package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokentrace/tokentrace/internal/route"
)

// Replica is one upstream server of a pool, with the live state routing
// reads: requests outstanding through this gateway, and the queue figures
// last scraped from its /metrics.
type Replica struct {
	cfg         ReplicaConfig
	outstanding atomic.Int64

	mu        sync.Mutex
	waiting   float64 // e.g. vllm:num_requests_waiting
	kvUsage   float64 // e.g. vllm:kv_cache_usage_perc, 0..1
	scrapedAt time.Time
	scrapeErr error
}

// URL is the replica's base URL.
func (r *Replica) URL() string { return r.cfg.URL }

// Outstanding is the number of requests this gateway has in flight to r.
func (r *Replica) Outstanding() int64 { return r.outstanding.Load() }

// load returns the last scraped queue figures and whether they are fresh
// (scraped within maxAge of now).
func (r *Replica) load(now time.Time, maxAge time.Duration) (waiting, kv float64, fresh bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fresh = !r.scrapedAt.IsZero() && r.scrapeErr == nil && now.Sub(r.scrapedAt) <= maxAge
	return r.waiting, r.kvUsage, fresh
}

// Name is the replica's URL: prefix affinity hashes it (route.Replica).
func (r *Replica) Name() string { return r.cfg.URL }

// Load returns the last scraped queue figures and whether they are fresh
// (scraped within maxAge of now), for route.Replica.
func (r *Replica) Load(now time.Time, maxAge time.Duration) (waiting, kv float64, fresh bool) {
	return r.load(now, maxAge)
}

// AffinityKey is the prefix hash, the key of prefix-affinity routing
// (route.Request).
func (q *Request) AffinityKey() uint64 { return q.PrefixHash }

// Balancer picks a replica for a request among the candidates (never
// empty). Implementations must be safe for concurrent use. The policies
// are internal/route's, shared with the simulator.
type Balancer = route.Balancer[*Request, *Replica]

// The balancers, internal/route's policies over the gateway's replicas.
type (
	RoundRobin       = route.RoundRobin[*Request, *Replica]
	LeastOutstanding = route.LeastOutstanding[*Request, *Replica]
	QueueAware       = route.QueueAware[*Request, *Replica]
	PrefixAffinity   = route.PrefixAffinity[*Request, *Replica]
)

// newBalancer builds the balancer a pool's configuration names (validated,
// so known).
func newBalancer(cfg PoolConfig, now func() time.Time) Balancer {
	b, err := route.New[*Request, *Replica](cfg.Balancer, route.Options{MaxAge: 3 * cfg.ScrapeInterval.D(), Now: now})
	if err != nil {
		return &LeastOutstanding{}
	}
	return b
}

// metricNames are the queue gauges scraped per replica kind: requests
// waiting, and KV-cache usage as a fraction.
func metricNames(kind string) (waiting, kv []string) {
	switch kind {
	case "sglang":
		return []string{"sglang:num_queue_reqs"}, []string{"sglang:token_usage"}
	case "tgi":
		return []string{"tgi_queue_size"}, nil
	case "llamacpp":
		return []string{"llamacpp:requests_deferred"}, []string{"llamacpp:kv_cache_usage_ratio"}
	}
	return []string{"vllm:num_requests_waiting"}, []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}
}

// parseGauges sums, over label sets, the values of the named metrics in a
// Prometheus text exposition. found reports which names appeared.
func parseGauges(r io.Reader, names []string) (sums map[string]float64, err error) {
	sums = map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		for _, n := range names {
			if !strings.HasPrefix(line, n) || len(line) == len(n) || (line[len(n)] != '{' && line[len(n)] != ' ') {
				continue
			}
			rest := line[len(n):]
			if rest[0] == '{' {
				end := strings.LastIndexByte(rest, '}')
				if end < 0 {
					return nil, fmt.Errorf("metrics line %q: unterminated labels", line)
				}
				rest = rest[end+1:]
			}
			f := strings.Fields(rest)
			if len(f) == 0 {
				return nil, fmt.Errorf("metrics line %q: no value", line)
			}
			v, err := strconv.ParseFloat(f[0], 64)
			if err != nil {
				return nil, fmt.Errorf("metrics line %q: %w", line, err)
			}
			sums[n] += v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	return sums, nil
}

// scrape reads one replica's queue figures.
func (r *Replica) scrape(ctx context.Context, client *http.Client, now time.Time) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.cfg.URL+"/metrics", nil)
	if err != nil {
		return err
	}
	if auth := r.cfg.authorization(); auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := client.Do(req)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("scrape %s/metrics: status %d", r.cfg.URL, resp.StatusCode)
	}
	var sums map[string]float64
	if err == nil {
		wn, kn := metricNames(r.cfg.Kind)
		sums, err = parseGauges(io.LimitReader(resp.Body, 8<<20), append(wn, kn...))
	}
	if resp != nil {
		_ = resp.Body.Close()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.scrapeErr = err
	if err != nil {
		return err
	}
	wn, kn := metricNames(r.cfg.Kind)
	r.waiting, r.kvUsage = 0, 0
	for _, n := range wn {
		r.waiting += sums[n]
	}
	for _, n := range kn {
		if v, ok := sums[n]; ok {
			r.kvUsage = v
			break
		}
	}
	r.scrapedAt = now
	return nil
}
