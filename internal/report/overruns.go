package report

import (
	"fmt"
	"slices"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// overruns counts the successful requests whose server split exceeds the
// client's time before the first token (row.serverOverrun).
func (a *analysis) overruns() int {
	n := 0
	for _, i := range a.ok {
		if a.rows[i].serverOverrun() > 0 {
			n++
		}
	}
	return n
}

// stragglers notes a run whose last requests ended far beyond the others:
// among the last 1 % of ends (at least one), a gap to the end before it of
// more than max(1 s, 10 × the median E2E) — a run stopped or stalled while
// they were in flight, whose last numbers are not the server's.
func (a *analysis) stragglers() []string {
	var ends []int64
	for i := range a.rows {
		if e := a.rows[i].end; e > 0 {
			ends = append(ends, e)
		}
	}
	n := len(ends)
	if n < 10 {
		return nil
	}
	slices.Sort(ends)
	limit := int64(1e9)
	if e2e := a.sample(latency.E2E); len(e2e) > 0 {
		limit = max(limit, 10*e2e[len(e2e)/2])
	}
	k := max(1, n/100)
	for i := n - k; i < n; i++ {
		if gap := ends[i] - ends[i-1]; gap > limit {
			return []string{fmt.Sprintf("the last %d requests ended %s or more after the %d before them "+
				"(more than max(1 s, 10 × the median E2E)): the run was probably stopped or stalled while they "+
				"were in flight; their numbers may not be the server's", n-i, dur(time.Duration(gap)), i)}
		}
	}
	return nil
}
