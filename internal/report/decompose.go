package report

import (
	"fmt"
	"math"
	"slices"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// ranked is a successful request and the value it is ranked by.
type ranked struct {
	v int64
	i int32
}

// rank orders the successful requests by total (ties by input order).
func (a *analysis) rank(total func(*row) int64) []ranked {
	ps := make([]ranked, len(a.ok))
	for k, i := range a.ok {
		ps[k] = ranked{total(&a.rows[i]), i}
	}
	slices.SortFunc(ps, func(x, y ranked) int {
		if c := cmpInt64(x.v, y.v); c != 0 {
			return c
		}
		return int(x.i - y.i)
	})
	return ps
}

// splitTotal is what a decomposition splits: E2E or TTFT from the
// intended send.
func splitTotal(ttft bool) func(*row) int64 {
	if ttft {
		return func(r *row) int64 { return r.firstOut() - r.intended }
	}
	return func(r *row) int64 { return r.end - r.intended }
}

// decompose groups successful requests by E2E (or TTFT) from the intended
// send and averages each part of their paths over each group.
func (a *analysis) decompose(ttft bool) *Decomposition {
	n := len(a.ok)
	ps := a.rank(splitTotal(ttft))
	d := &Decomposition{Of: latency.E2EIntended}
	if ttft {
		d.Of = latency.TTFTIntended
	}
	rank := func(p float64) int { return int(stats.Rank(p, int64(n))) }
	lo, hi := rank(40)-1, rank(60)
	groups := []struct {
		name   string
		lo, hi int
	}{
		{"median", lo, max(hi, lo+1)},
		{"p95+", min(rank(95), n-1), n},
		{"p99+", min(rank(99), n-1), n},
	}
	for _, g := range groups {
		d.Groups = append(d.Groups, a.groupOf(g.name, ps[g.lo:g.hi], ttft))
	}
	return d
}

// groupOf averages the parts over a group of ranked requests.
func (a *analysis) groupOf(name string, ps []ranked, ttft bool) StageGroup {
	sum := make([]float64, len(a.paths.keys))
	var tot float64
	for _, p := range ps {
		a.paths.parts(&a.rows[p.i], func(k uint16, e2e, t int64) {
			if ttft {
				sum[k] += float64(t)
			} else {
				sum[k] += float64(e2e)
			}
		})
		tot += float64(p.v)
	}
	return a.stageGroup(name, len(ps), sum, tot, ttft)
}

// minTail is the fewest requests a rule judges a tail on: above the P95
// holds a handful of requests in a short run, which one hiccup decides.
const minTail = 10

// tail is the decomposition's p95+ group when it holds at least minTail
// requests, else the slowest minTail (all of them in a smaller run), named
// "slowest N"; nil without a decomposition.
func (a *analysis) tail(d *Decomposition) *StageGroup {
	g := group(d, "p95+")
	if g == nil || g.Requests >= minTail || len(a.ok) <= g.Requests {
		return g
	}
	ttft := d.Of == latency.TTFTIntended
	ps := a.rank(splitTotal(ttft))
	k := min(minTail, len(ps))
	sg := a.groupOf(fmt.Sprintf("slowest %d", k), ps[len(ps)-k:], ttft)
	return &sg
}

// stageGroup is one group's mean per part and share of the total, from
// the sums over its n requests, the parts in path order: the client's
// always, the others where some request of the run has them.
func (a *analysis) stageGroup(name string, n int, sum []float64, tot float64, ttft bool) StageGroup {
	cnt := float64(n)
	sg := StageGroup{Name: name, Requests: n, TotalMS: msf(tot / cnt)}
	seen := a.paths.seenE2E
	if ttft {
		seen = a.paths.seenTTFT
	}
	best := math.Inf(-1)
	for _, k := range a.paths.order {
		if int(k) >= len(clientKeys) && !seen[k] {
			continue
		}
		m := sum[k] / cnt
		share := 0.0
		if tot != 0 {
			share = sum[k] / tot
		}
		key := a.paths.keys[k]
		sg.Stages = append(sg.Stages, StageShare{Hop: key.hop, Stage: key.stage, MeanMS: msf(m), Share: share})
		if m > best {
			best, sg.Largest, sg.LargestHop = m, key.stage, key.hop
		}
	}
	return sg
}

func cmpInt64(x, y int64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}
