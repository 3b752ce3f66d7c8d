package gateway

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokentrace/tokentrace/internal/route"
	"github.com/tokentrace/tokentrace/internal/scrape"
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
	// RoundRobin is route.RoundRobin.
	RoundRobin = route.RoundRobin[*Request, *Replica]
	// LeastOutstanding is route.LeastOutstanding.
	LeastOutstanding = route.LeastOutstanding[*Request, *Replica]
	// QueueAware is route.QueueAware.
	QueueAware = route.QueueAware[*Request, *Replica]
	// PrefixAffinity is route.PrefixAffinity.
	PrefixAffinity = route.PrefixAffinity[*Request, *Replica]
	// PrefixBounded is route.PrefixBounded.
	PrefixBounded = route.PrefixBounded[*Request, *Replica]
)

// newBalancer builds the balancer a pool's configuration names (validated,
// so known).
func newBalancer(cfg PoolConfig, now func() time.Time) Balancer {
	b, err := route.New[*Request, *Replica](cfg.Balancer, route.Options{MaxAge: 3 * cfg.ScrapeInterval.D(), Now: now, LoadFactor: cfg.LoadFactor})
	if err != nil {
		return &LeastOutstanding{}
	}
	return b
}

// scrape reads one replica's queue figures: requests waiting and the
// KV-cache usage, with the names of its kind (internal/scrape).
func (r *Replica) scrape(ctx context.Context, client *http.Client, now time.Time) error {
	var header http.Header
	if auth := r.cfg.authorization(); auth != "" {
		header = http.Header{"Authorization": {auth}}
	}
	fams, err := scrape.Get(ctx, client, r.cfg.URL+"/metrics", header)
	if err != nil {
		err = fmt.Errorf("scrape %s/metrics: %w", r.cfg.URL, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.scrapeErr = err
	if err != nil {
		return err
	}
	e := scrape.ForKind(r.cfg.Kind)
	r.waiting, _ = fams.First(e.Waiting)
	r.kvUsage, _ = fams.First(e.KVUsage)
	r.scrapedAt = now
	return nil
}
