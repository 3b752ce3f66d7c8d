// Command slowdown judges a simulated run by Splitwise's SLOs: percentiles
// of per-request slowdown against the same request alone on a DGX-A100
// (docs/performance.md, "A published result").
//
//	go run ./bench/splitwise/slowdown ALONE_DIR RUN_DIR
//
// Each request's baseline is read off a run of requests alone (ALONE_DIR,
// one at a time on the A100 replica) by linear interpolation over the
// prompt's length, as the Splitwise artifact reads its performance model
// (notebooks/plots.ipynb, get_data; perf_model.py, add_baseline_perf): its
// TTFT and its time per decode step; the baseline E2E is TTFT + TBT ×
// (output tokens − 1). The slowdowns are TTFT, TBT and E2E (timing) over
// their baselines; each of P50/P90/P99 of each must stay under
// Splitwise's limits (TTFT 2/3/6, TBT and E2E 1.25/1.5/5).
//
// It prints the nine percentiles after PASS or FAIL, and exits 0 on
// PASS, 1 on FAIL, 2 when the folders cannot be judged. Of this module it
// imports only internal/latency and internal/results.
package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/results"
)

// limit is one metric's Splitwise limits at P50, P90 and P99.
type limit struct {
	metric string
	at     [3]float64
}

// limits are Splitwise's SLOs (notebooks/plots.ipynb, get_slo), in the
// order printed.
var limits = []limit{
	{"ttft", [3]float64{2, 3, 6}},
	{"tbt", [3]float64{1.25, 1.5, 5}},
	{"e2e", [3]float64{1.25, 1.5, 5}},
}

// quantiles are the percentiles judged, as fractions.
var quantiles = [3]float64{0.5, 0.9, 0.99}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: slowdown ALONE_DIR RUN_DIR")
		os.Exit(2)
	}
	line, ok, err := judge(os.Args[1], os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "slowdown:", err)
		os.Exit(2)
	}
	fmt.Println(line)
	if !ok {
		os.Exit(1)
	}
}

// judge reads both folders' records and returns the verdict line and
// whether every percentile is under its limit.
func judge(aloneDir, runDir string) (string, bool, error) {
	alone, err := records(aloneDir)
	if err != nil {
		return "", false, err
	}
	run, err := records(runDir)
	if err != nil {
		return "", false, err
	}
	slow, err := slowdowns(alone, run)
	if err != nil {
		return "", false, err
	}
	ok := true
	var out []string
	for m, lim := range limits {
		for i, q := range quantiles {
			v := quantile(slow[m], q)
			mark := ""
			if !(v < lim.at[i]) {
				ok, mark = false, "!"
			}
			out = append(out, fmt.Sprintf("%s:p%d=%.2f<%g%s", lim.metric, int(math.Round(q*100)), v, lim.at[i], mark))
		}
	}
	verdict := "PASS"
	if !ok {
		verdict = "FAIL"
	}
	return verdict + " slowdown " + strings.Join(out, " "), ok, nil
}

// slowdowns returns each of run's records' TTFT, TBT and E2E slowdowns
// (in limits' order) against the baselines read off alone.
func slowdowns(alone, run []latency.Record) ([3][]float64, error) {
	var ttfts, tbts []point
	for i := range alone {
		ttft, _, _ := timing(&alone[i])
		ttfts = append(ttfts, point{alone[i].InputTokens, ttft})
		if tbt, ok := aloneTBT(&alone[i]); ok {
			tbts = append(tbts, point{alone[i].InputTokens, tbt})
		}
	}
	var slow [3][]float64
	if len(ttfts) == 0 || len(tbts) == 0 || len(run) == 0 {
		return slow, errors.New("no answered requests to judge (the run) or to judge them by (the run alone, with one of more than one token)")
	}
	bTTFT, bTBT := newCurve(ttfts), newCurve(tbts)
	for i := range run {
		r := &run[i]
		ttft, tbt, e2e := timing(r)
		p, n := r.InputTokens, r.OutputTokens
		baseTTFT, baseTBT := bTTFT.at(p), bTBT.at(p)
		baseE2E := baseTTFT + baseTBT*float64(n-1)
		if baseTTFT == 0 || baseTBT == 0 || baseE2E == 0 {
			return slow, fmt.Errorf("request %q: a baseline of 0 s at %d prompt tokens", r.ID, p)
		}
		slow[0] = append(slow[0], ttft/baseTTFT)
		slow[1] = append(slow[1], tbt/baseTBT)
		slow[2] = append(slow[2], e2e/baseE2E)
	}
	return slow, nil
}

// records reads dir's requests.jsonl: the requests answered (status 200)
// with a first token and at least one output token.
func records(dir string) ([]latency.Record, error) {
	all, err := results.ReadRecords(results.RecordsPath(dir))
	if err != nil {
		return nil, err
	}
	kept := all[:0]
	for _, r := range all {
		if r.Status == 200 && r.FirstTokenNS != 0 && r.OutputTokens >= 1 {
			kept = append(kept, r)
		}
	}
	return kept, nil
}

// timing returns Splitwise's TTFT, time between tokens and E2E of a
// record, in s.
//
// The artifact ends TTFT when the prompt phase ends (task.py, PromptTask
// complete: the prompt machine emits the first token) and takes TBT as
// (E2E − TTFT) / output tokens (scheduler.py, tbt_times). A disaggregated
// record's prompt phase is its prefill hop (prefill_queue + prefill); the
// KV transfer and the decode side's first step then count in TBT, as the
// artifact counts them. Under vLLM's protocol the client's first token
// comes from the decode side's first step instead (FirstTokenNS).
func timing(r *latency.Record) (ttft, tbt, e2e float64) {
	e2e = float64(r.EndNS-r.SentNS) / 1e9
	var pre int64
	prefill := false
	for _, s := range r.Timing {
		if s.Hop == latency.HopPrefill {
			pre += s.NS
			prefill = true
		}
	}
	if prefill {
		ttft = float64(pre) / 1e9
	} else {
		ttft = float64(r.FirstTokenNS-r.SentNS) / 1e9
	}
	return ttft, (e2e - ttft) / float64(r.OutputTokens), e2e
}

// aloneTBT returns a request alone's time per decode step, in s; false
// for an answer of one token.
func aloneTBT(r *latency.Record) (float64, bool) {
	n := r.OutputTokens
	if n <= 1 {
		return 0, false
	}
	return float64(r.EndNS-r.FirstTokenNS) / 1e9 / float64(n-1), true
}

// point is one request's value at its prompt length.
type point struct {
	x int
	y float64
}

// curve is the median of the ys at each x (the upper one of an even
// count), linearly interpolated between xs and flat beyond the ends.
type curve struct {
	xs []int
	ys []float64
}

// newCurve returns the curve of pairs (at least one).
func newCurve(pairs []point) *curve {
	by := map[int][]float64{}
	for _, p := range pairs {
		by[p.x] = append(by[p.x], p.y)
	}
	c := &curve{}
	for x := range by {
		c.xs = append(c.xs, x)
	}
	sort.Ints(c.xs)
	for _, x := range c.xs {
		ys := by[x]
		sort.Float64s(ys)
		c.ys = append(c.ys, ys[len(ys)/2])
	}
	return c
}

// at returns the curve's value at x.
func (c *curve) at(x int) float64 {
	i := sort.SearchInts(c.xs, x)
	switch {
	case i == 0:
		return c.ys[0]
	case i == len(c.xs):
		return c.ys[len(c.ys)-1]
	}
	x0, x1, y0, y1 := c.xs[i-1], c.xs[i], c.ys[i-1], c.ys[i]
	return y0 + (y1-y0)*float64(x-x0)/float64(x1-x0)
}

// quantile returns the q quantile of vs (at least one) by linear
// interpolation between the closest ranks (pandas' default); vs is
// sorted in place.
func quantile(vs []float64, q float64) float64 {
	sort.Float64s(vs)
	pos := q * float64(len(vs)-1)
	lo := int(pos)
	hi := min(lo+1, len(vs)-1)
	return vs[lo] + (vs[hi]-vs[lo])*(pos-float64(lo))
}
