package report

import (
	"fmt"
	"math"
	"slices"

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

// decompose groups successful requests by the value of total (ranked) and
// averages the given stages over each group.
func (a *analysis) decompose(of string, total func(*row) int64, stages []int) *Decomposition {
	n := len(a.ok)
	ps := a.rank(total)
	d := &Decomposition{Of: of}
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
		d.Groups = append(d.Groups, a.groupOf(g.name, ps[g.lo:g.hi], stages))
	}
	return d
}

// groupOf averages the stages over a group of ranked requests.
func (a *analysis) groupOf(name string, ps []ranked, stages []int) StageGroup {
	var sum [nStages]float64
	var tot float64
	for _, p := range ps {
		s := a.rows[p.i].stages()
		for _, st := range stages {
			sum[st] += float64(s[st])
		}
		tot += float64(p.v)
	}
	return a.stageGroup(name, len(ps), sum, tot, stages)
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
	total, stages := func(r *row) int64 { return r.end - r.intended }, allStages()
	if d.Of == "ttft_intended" {
		total, stages = func(r *row) int64 { return r.firstOut() - r.intended }, ttftStages
	}
	ps := a.rank(total)
	k := min(minTail, len(ps))
	sg := a.groupOf(fmt.Sprintf("slowest %d", k), ps[len(ps)-k:], stages)
	return &sg
}

// stageGroup is one group's mean per stage and share of the total, from
// the sums over its n requests.
func (a *analysis) stageGroup(name string, n int, sum [nStages]float64, tot float64, stages []int) StageGroup {
	cnt := float64(n)
	sg := StageGroup{Name: name, Requests: n, TotalMS: msf(tot / cnt)}
	best, bestV := "", math.Inf(-1)
	for _, st := range stages {
		m := sum[st] / cnt
		if !stageSeen(a, st) {
			continue
		}
		share := 0.0
		if tot != 0 {
			share = sum[st] / tot
		}
		sg.Stages = append(sg.Stages, StageShare{Stage: string(stageOrder[st]), MeanMS: msf(m), Share: share})
		if m > bestV {
			best, bestV = string(stageOrder[st]), m
		}
	}
	sg.Largest = best
	return sg
}

// stageSeen says whether any successful request has the stage.
func stageSeen(a *analysis, st int) bool {
	switch st {
	case stCQ, stConnect, stSend, stDecode:
		return true
	}
	for _, i := range a.ok {
		if r := &a.rows[i]; stageApplies(r, st) {
			return true
		}
	}
	return false
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
