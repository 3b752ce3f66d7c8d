package report

import (
	"math"
	"slices"

	"github.com/tokentrace/tokentrace/internal/stats"
)

// decompose groups successful requests by the value of total (ranked) and
// averages the given stages over each group.
func (a *analysis) decompose(of string, total func(*row) int64, stages []int) *Decomposition {
	n := len(a.ok)
	type pair struct {
		v int64
		i int32
	}
	ps := make([]pair, n)
	for k, i := range a.ok {
		ps[k] = pair{total(&a.rows[i]), i}
	}
	slices.SortFunc(ps, func(x, y pair) int {
		if c := cmpInt64(x.v, y.v); c != 0 {
			return c
		}
		return int(x.i - y.i)
	})

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
		var sum [nStages]float64
		var tot float64
		for _, p := range ps[g.lo:g.hi] {
			s := a.rows[p.i].stages()
			for _, st := range stages {
				sum[st] += float64(s[st])
			}
			tot += float64(p.v)
		}
		d.Groups = append(d.Groups, a.stageGroup(g.name, g.hi-g.lo, sum, tot, stages))
	}
	return d
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
