// Package route holds the request-placement policies shared by the gateway
// (on the wall clock, over HTTP replicas) and the simulator (on a virtual
// clock, over simulated engines): the balancers that pick a replica, the
// length bands that pick a pool, and the admission queue's decisions
// (bounded queue, priority and deadline order, early rejection, adaptive
// concurrency limit). Nothing here reads a clock, blocks or does I/O: time
// is passed in, and callers add their own locking, waiting and transport.
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
)

// Names lists the balancers New knows, in documentation order.
var Names = []string{NameRoundRobin, NameLeastOutstanding, NameQueueAware, NamePrefixAffinity}

// Options tune the balancers that have settings.
type Options struct {
	// MaxAge is how old queue_aware's reported figures may be.
	MaxAge time.Duration
	// Now is queue_aware's clock.
	Now func() time.Time
	// Slack is prefix_affinity's tolerance (default 8, the gateway's).
	Slack int64
}

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
	}
	return nil, fmt.Errorf("unknown balancer %q (want round_robin, least_outstanding, queue_aware or prefix_affinity)", name)
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
