package route

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// Replica is what a balancer reads of one replica.
type Replica interface {
	// Name identifies the replica for rendezvous hashing (the gateway
	// uses its URL): the same name keeps the same prefixes.
	Name() string
	// Outstanding is the number of requests in flight to the replica
	// through this router.
	Outstanding() int64
	// Load returns the replica's last reported waiting requests and KV
	// cache usage (0..1), and whether they are fresh: reported within
	// maxAge of now.
	Load(now time.Time, maxAge time.Duration) (waiting, kvUsage float64, fresh bool)
}

// Request is what a balancer reads of one request.
type Request interface {
	// AffinityKey hashes the request's prompt prefix: prefix affinity
	// sends equal keys to the same replica.
	AffinityKey() uint64
}

// Balancer picks a replica for a request among the candidates (never
// empty). The implementations here are safe for concurrent use.
type Balancer[Q Request, R Replica] interface {
	Pick(req Q, candidates []R) R
}

// Balancer names, as the gateway's configuration and simulate's --router
// spell them.
const (
	NameRoundRobin       = "round_robin"
	NameLeastOutstanding = "least_outstanding"
	NameQueueAware       = "queue_aware"
	NamePrefixAffinity   = "prefix_affinity"
	NamePrefixBounded    = "prefix_bounded_load"
)

// Names lists the balancers New knows, in documentation order.
var Names = []string{NameRoundRobin, NameLeastOutstanding, NameQueueAware, NamePrefixAffinity, NamePrefixBounded}

// Options tune the balancers that have settings.
type Options struct {
	// MaxAge is how old queue_aware's reported figures may be.
	MaxAge time.Duration
	// Now is queue_aware's clock.
	Now func() time.Time
	// Slack is prefix_affinity's tolerance (default 8, the gateway's).
	Slack int64
	// LoadFactor is prefix_bounded_load's bound c = 1 + ε (default
	// DefaultLoadFactor).
	LoadFactor float64
}

// DefaultScrapeInterval is how often queue_aware's figures are read from
// each replica by default, by the gateway and by the simulator alike (a
// twin of a served gateway scrapes on the same ticker).
const DefaultScrapeInterval = time.Second

// DefaultSlack is prefix affinity's default tolerance: the preferred
// replica is kept while it has at most this many requests outstanding
// beyond the least loaded candidate.
const DefaultSlack = 8

// New returns the balancer called name; an empty name is least
// outstanding. queue_aware needs opts.Now.
func New[Q Request, R Replica](name string, opts Options) (Balancer[Q, R], error) {
	switch name {
	case NameRoundRobin:
		return &RoundRobin[Q, R]{}, nil
	case "", NameLeastOutstanding:
		return &LeastOutstanding[Q, R]{}, nil
	case NameQueueAware:
		if opts.Now == nil {
			return nil, fmt.Errorf("balancer %s: no clock", name)
		}
		return &QueueAware[Q, R]{MaxAge: opts.MaxAge, Now: opts.Now}, nil
	case NamePrefixAffinity:
		slack := opts.Slack
		if slack == 0 {
			slack = DefaultSlack
		}
		return &PrefixAffinity[Q, R]{Slack: slack}, nil
	case NamePrefixBounded:
		f := opts.LoadFactor
		if f == 0 {
			f = DefaultLoadFactor
		}
		if f < 1 || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("balancer %s: load factor %g must be at least 1", name, f)
		}
		return &PrefixBounded[Q, R]{LoadFactor: f}, nil
	}
	return nil, fmt.Errorf("unknown balancer %q (want round_robin, least_outstanding, queue_aware, prefix_affinity or prefix_bounded_load)", name)
}

// RoundRobin cycles through the candidates.
type RoundRobin[Q Request, R Replica] struct{ n atomic.Uint64 }

// Pick implements Balancer.
func (b *RoundRobin[Q, R]) Pick(_ Q, c []R) R {
	return c[(b.n.Add(1)-1)%uint64(len(c))]
}

// LeastOutstanding picks the candidate with the fewest requests in flight;
// ties go round robin.
type LeastOutstanding[Q Request, R Replica] struct{ n atomic.Uint64 }

// Pick implements Balancer.
func (b *LeastOutstanding[Q, R]) Pick(_ Q, c []R) R {
	start := int(b.n.Add(1)-1) % len(c)
	best := c[start]
	bestOut := best.Outstanding()
	for i := 1; i < len(c); i++ {
		r := c[(start+i)%len(c)]
		if o := r.Outstanding(); o < bestOut {
			best, bestOut = r, o
		}
	}
	return best
}

// QueueAware scores each candidate by its outstanding requests plus the
// waiting requests it reported, with a penalty when its KV cache is nearly
// full (≥ 90 %: + 4 per point above). Figures older than MaxAge are stale
// and ignored: the score falls back to outstanding requests alone.
type QueueAware[Q Request, R Replica] struct {
	MaxAge time.Duration
	Now    func() time.Time
	n      atomic.Uint64
}

// Pick implements Balancer.
func (b *QueueAware[Q, R]) Pick(_ Q, c []R) R {
	now := b.Now()
	best := c[0]
	bestScore := math.Inf(1)
	start := int(b.n.Add(1)-1) % len(c)
	for i := range c {
		r := c[(start+i)%len(c)]
		s := float64(r.Outstanding())
		if w, kv, fresh := r.Load(now, b.MaxAge); fresh {
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
// prefix hash with each replica's name: adding or removing a replica moves
// only the prefixes that hashed to it. When the preferred replica has more
// than Slack requests outstanding beyond the least loaded candidate, the
// next replica in hash order is tried, then least outstanding.
type PrefixAffinity[Q Request, R Replica] struct {
	Slack int64
	lo    LeastOutstanding[Q, R]
}

// Pick implements Balancer.
func (b *PrefixAffinity[Q, R]) Pick(req Q, c []R) R {
	minOut := c[0].Outstanding()
	for _, r := range c[1:] {
		minOut = min(minOut, r.Outstanding())
	}
	// The two highest rendezvous weights, without sorting every candidate.
	key := req.AffinityKey()
	first, second := -1, -1
	var w1, w2 uint64
	for i, r := range c {
		w := hrw(key, r.Name())
		switch {
		case first < 0 || w > w1:
			second, w2 = first, w1
			first, w1 = i, w
		case second < 0 || w > w2:
			second, w2 = i, w
		}
	}
	for _, i := range [2]int{first, second} {
		if i >= 0 && c[i].Outstanding() <= minOut+b.Slack {
			return c[i]
		}
	}
	return b.lo.Pick(req, c)
}

// DefaultLoadFactor is prefix_bounded_load's default bound: no replica
// takes more than 1.25 × the average load.
const DefaultLoadFactor = 1.25

// PrefixBounded is consistent hashing with bounded loads (Mirrokni,
// Thorup and Zadimoghaddam, "Consistent Hashing with Bounded Loads",
// SODA 2018) over rendezvous hashing: with m the requests outstanding
// through this router counting the new one and n the candidates, each
// replica's capacity is ⌈LoadFactor × m / n⌉, and the request goes to the
// replica of highest rendezvous weight for its prefix key that is below
// its capacity. Equal keys go to the same replica from any router that
// sees the same replicas, until that replica's load reaches the bound;
// then to the next in the key's hash order, which is also the same from
// every router. Some replica is always below the bound (the loads sum to
// m − 1 < n × capacity).
//
// The load is what this router has outstanding: routers that share
// replicas without talking to each other each bound their own part, so
// the replicas' total load is bounded by LoadFactor × the average plus
// one per router (rounding), and a prefix that overflows at one router
// and not at another is served by two replicas of its hash order.
type PrefixBounded[Q Request, R Replica] struct {
	LoadFactor float64
}

// Pick implements Balancer.
func (b *PrefixBounded[Q, R]) Pick(req Q, c []R) R {
	// Each replica's count is read once: other requests move them while
	// this one is placed.
	var buf [64]int64
	out := buf[:0]
	m := int64(1)
	for _, r := range c {
		o := r.Outstanding()
		out = append(out, o)
		m += o
	}
	capacity := boundedCapacity(b.LoadFactor, m, len(c))
	key := req.AffinityKey()
	best := -1
	var bestW uint64
	for i, r := range c {
		if out[i] >= capacity {
			continue
		}
		if w := hrw(key, r.Name()); best < 0 || w > bestW {
			best, bestW = i, w
		}
	}
	return c[best]
}

// boundedCapacity is ⌈f × m / n⌉, with a margin of 1e-9 so that a product
// that is an integer in exact arithmetic (1.2 × 5 / 6) is not rounded up
// past it by binary floating point.
func boundedCapacity(f float64, m int64, n int) int64 {
	return int64(math.Ceil(f*float64(m)/float64(n) - 1e-9))
}

// hrw is the rendezvous weight of key on the replica called name: FNV-1a
// over the key's 8 little-endian bytes and the name, then the splitmix64
// finaliser so that close keys spread. (Written out rather than with
// hash/fnv so that a pick allocates nothing.)
func hrw(key uint64, name string) uint64 {
	h := uint64(fnvOffset)
	for i := range 8 {
		h ^= uint64(byte(key >> (8 * i)))
		h *= fnvPrime
	}
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= fnvPrime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// Band picks a length band: the index of the first band whose input bound
// (maxInput(band); 0 is no bound) is at least inputTokens, or -1 when the
// request is longer than every band.
func Band[B any](bands []B, maxInput func(B) int, inputTokens int) int {
	for i, b := range bands {
		if m := maxInput(b); m == 0 || inputTokens <= m {
			return i
		}
	}
	return -1
}
