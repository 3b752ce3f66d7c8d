package gateway

import (
	"bufio"
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
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

// Balancer picks a replica for a request among the candidates (never
// empty). Implementations must be safe for concurrent use.
type Balancer interface {
	Pick(req *Request, candidates []*Replica) *Replica
}

// RoundRobin cycles through the candidates.
type RoundRobin struct{ n atomic.Uint64 }

// Pick implements Balancer.
func (b *RoundRobin) Pick(_ *Request, c []*Replica) *Replica {
	return c[(b.n.Add(1)-1)%uint64(len(c))]
}

// LeastOutstanding picks the candidate with the fewest requests in flight
// through this gateway; ties go round robin.
type LeastOutstanding struct{ n atomic.Uint64 }

// Pick implements Balancer.
func (b *LeastOutstanding) Pick(_ *Request, c []*Replica) *Replica {
	start := int(b.n.Add(1)-1) % len(c)
	best := c[start]
	for i := 1; i < len(c); i++ {
		r := c[(start+i)%len(c)]
		if r.Outstanding() < best.Outstanding() {
			best = r
		}
	}
	return best
}

// QueueAware scores each candidate by its outstanding requests plus the
// waiting requests it reported, with a penalty when its KV cache is nearly
// full (≥ 90 %: + 4 per point above). Figures older than MaxAge are stale
// and ignored: the score falls back to outstanding requests alone.
type QueueAware struct {
	MaxAge time.Duration
	Now    func() time.Time
	lo     LeastOutstanding
}

// Pick implements Balancer.
func (b *QueueAware) Pick(req *Request, c []*Replica) *Replica {
	now := b.Now()
	var best *Replica
	bestScore := math.Inf(1)
	start := int(b.lo.n.Add(1)-1) % len(c)
	for i := range c {
		r := c[(start+i)%len(c)]
		s := float64(r.Outstanding())
		if w, kv, fresh := r.load(now, b.MaxAge); fresh {
			s += w
			if kv >= 0.9 {
				s += 4 * 100 * (kv - 0.9)
			}
		}
		if s < bestScore {
			best, bestScore = r, s
		}
	}
	return best
}

// PrefixAffinity sends requests whose prompts share their leading bytes to
// the same replica, by rendezvous (highest-random-weight) hashing of the
// prefix hash with each replica's URL: adding or removing a replica moves
// only the prefixes that hashed to it. When the preferred replica has more
// than Slack requests outstanding beyond the least loaded candidate, the
// next replica in hash order is tried, then least outstanding.
type PrefixAffinity struct {
	Slack int64
	lo    LeastOutstanding
}

// Pick implements Balancer.
func (b *PrefixAffinity) Pick(req *Request, c []*Replica) *Replica {
	minOut := c[0].Outstanding()
	for _, r := range c[1:] {
		minOut = min(minOut, r.Outstanding())
	}
	order := make([]*Replica, len(c))
	copy(order, c)
	key := req.PrefixHash
	slices.SortFunc(order, func(x, y *Replica) int {
		hx, hy := hrw(key, x.cfg.URL), hrw(key, y.cfg.URL)
		switch {
		case hx > hy:
			return -1
		case hx < hy:
			return 1
		}
		return 0
	})
	for _, r := range order[:min(2, len(order))] {
		if r.Outstanding() <= minOut+b.Slack {
			return r
		}
	}
	return b.lo.Pick(req, c)
}

func hrw(key uint64, url string) uint64 {
	h := fnv.New64a()
	var k [8]byte
	for i := range k {
		k[i] = byte(key >> (8 * i))
	}
	_, _ = h.Write(k[:])
	_, _ = h.Write([]byte(url))
	// final mix (splitmix64) so close keys spread
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// newBalancer builds the balancer a pool's configuration names.
func newBalancer(cfg PoolConfig, now func() time.Time) Balancer {
	switch cfg.Balancer {
	case "round_robin":
		return &RoundRobin{}
	case "queue_aware":
		return &QueueAware{MaxAge: 3 * cfg.ScrapeInterval.D(), Now: now}
	case "prefix_affinity":
		return &PrefixAffinity{Slack: 8}
	}
	return &LeastOutstanding{}
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
