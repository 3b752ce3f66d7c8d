package capacity

import (
	"container/heap"
	"math/rand/v2"
	"testing"
)

// servers is a min-heap of the instants a deployment's slots come free.
type servers []float64

func (s servers) Len() int           { return len(s) }
func (s servers) Less(i, j int) bool { return s[i] < s[j] }
func (s servers) Swap(i, j int)      { s[i], s[j] = s[j], s[i] }
func (s *servers) Push(x any)        { *s = append(*s, x.(float64)) }
func (s *servers) Pop() any {
	old := *s
	x := old[len(old)-1]
	*s = old[:len(old)-1]
	return x
}

// queueRun is a deployment of 16 slots, each request holding one for 4 s
// (a batching engine's long E2E against a short run), FIFO, offered
// Poisson arrivals at util × its 4 req/s: the intended send and E2E of the
// n requests judged after a warm-up of n/10, in seconds, seeded.
func queueRun(util float64, n int, seed uint64) *judge {
	const slots, hold = 16, 4.0
	rng := rand.New(rand.NewPCG(seed, 37))
	free := make(servers, slots)
	j := &judge{}
	var at float64
	for i := range n + n/10 {
		at += rng.ExpFloat64() / (util * slots / hold)
		start := max(at, heap.Pop(&free).(float64))
		heap.Push(&free, start+hold)
		if i >= n/10 {
			j.sends = append(j.sends, at)
			j.e2es = append(j.e2es, start+hold-at)
		}
	}
	return j
}

// Known answers of the backlog test: a deployment at 50 % utilisation
// keeps up whatever the arrivals' chance variation, over 20 seeds, on a
// short replay (60 requests judged, each in flight a fifth of the judged
// span; Little's law over the in-flight count flagged 7 of 20) and on the
// twin's least span (40 × E2E); one offered 120 % of what it completes
// falls behind at every seed over the twin's least span.
func TestGrowthKnownAnswers(t *testing.T) {
	for _, tt := range []struct {
		util  float64
		n     int
		keeps bool
	}{{0.5, 60, true}, {0.5, 320, true}, {1.2, 768, false}} {
		lo, hi := 1.0, -1.0
		for seed := range uint64(20) {
			g, ok := queueRun(tt.util, tt.n, seed).growth()
			if !ok {
				t.Fatalf("util %.1f seed %d: no growth measured", tt.util, seed)
			}
			if keeps := g <= MaxGrowth; keeps != tt.keeps {
				t.Errorf("util %.1f seed %d: growth %.3f, keeps up %v, want %v", tt.util, seed, g, keeps, tt.keeps)
			}
			lo, hi = min(lo, g), max(hi, g)
		}
		t.Logf("util %.1f, %d requests: growth %.3f to %.3f over 20 seeds", tt.util, tt.n, lo, hi)
	}
}
