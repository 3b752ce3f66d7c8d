package verify

import (
	"cmp"
	"math"
	"slices"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/results"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// Noise is how far chance moves one run's value of a row, relative to it
// (docs/metrics.md, "Verify"): Sampling is the percentile's bootstrap
// standard deviation over the run's own requests (stats.BootstrapSD) ÷
// the percentile; Drift the spread between two runs of the same load that
// the run's two halves show beyond their sampling and beyond what the
// twin's own halves show, √max(0, (D − D_twin)² − 4·σ²) ÷ the percentile,
// D the first half's percentile less the second's (D_twin the same of the
// twin of the run: an overloaded queue's build-up is the load's, not
// noise) and σ the whole run's bootstrap standard deviation; Count how
// many values the percentile was taken over.
type Noise struct {
	Sampling, Drift float64
	Count           int
	// ClockMS is the measurement's own clock error, in ms: the load
	// generator's lateness (results.ClientLateness) at the row's
	// percentile — its P50 for a P50 row, its P99 above — the larger of
	// the two runs'; TTFT and E2E rows only.
	ClockMS float64
}

// clockAt is the runs' clock error for percentile p (0 where neither run
// recorded its lateness).
func clockAt(runs []results.ClientLateness, p float64) float64 {
	var m float64
	for _, l := range runs {
		if p <= 50 {
			m = max(m, l.P50MS)
		} else {
			m = max(m, l.P99MS)
		}
	}
	return m
}

// maxNoiseGaps bounds the inter-token gaps a run's noise is taken over
// (beyond it ITL's sampling error is below the report's own resolution).
const maxNoiseGaps = 1 << 21

// Requests are what a run's noise needs of its successful, non-warm-up
// records (Add them one by one).
type Requests struct {
	reqs []request
	gaps int
}

// request is one record's send instant and each of Metrics' values (ITL:
// its gaps).
type request struct {
	sent int64
	v    [4]int64 // one per Metrics
	has  [4]bool
	gaps []int64
}

// Add keeps what the noise needs of r, unless it failed or is warm-up.
func (q *Requests) Add(r *latency.Record) {
	if !r.OK() || r.EndNS <= 0 || r.Warmup {
		return
	}
	x := request{sent: r.SentNS}
	for i, m := range Metrics {
		if m == latency.ITL {
			if q.gaps < maxNoiseGaps {
				x.gaps = r.ITLs(nil)
				q.gaps += len(x.gaps)
			}
		} else if v, ok := r.Value(m); ok {
			x.v[i], x.has[i] = int64(v), true
		}
	}
	q.reqs = append(q.reqs, x)
}

// ReadRequests reads the results folder dir's records (a line report
// skips is skipped here too).
func ReadRequests(dir string) (*Requests, error) {
	q := &Requests{}
	err := results.EachRecord(results.RecordsPath(dir), func(_ int, r *latency.Record, err error) error {
		if err == nil {
			q.Add(r)
		}
		return nil
	})
	return q, err
}

// halves are the i-th metric's sorted values over all the requests and
// over each half by send instant.
func (q *Requests) halves(i int) (all, first, second []int64) {
	slices.SortStableFunc(q.reqs, func(a, b request) int { return cmp.Compare(a.sent, b.sent) })
	h := (len(q.reqs) + 1) / 2
	return values(q.reqs, i), values(q.reqs[:h], i), values(q.reqs[h:], i)
}

// MeasureNoise gives each latency row's Noise of the run measured, keyed
// metric and stat ("ttft p95"), its drift net of twin's halves (nil: of
// none); a row with too few values (under 4) has none.
func MeasureNoise(measured, twin *Requests) map[string]Noise {
	out := map[string]Noise{}
	for i, m := range Metrics {
		if m == latency.ITL && measured.gaps >= maxNoiseGaps {
			continue
		}
		all, first, second := measured.halves(i)
		if len(all) < 4 {
			continue
		}
		var tf, ts []int64
		if twin != nil {
			_, tf, ts = twin.halves(i)
		}
		for _, p := range Percentiles {
			out[string(m)+" p"+pctName(p)] = noiseAt(all, first, second, tf, ts, p)
		}
	}
	return out
}

// noiseAt is one percentile's Noise from the run's sorted values and its
// halves', and the twin's halves' (none: no twin's trend to take out).
func noiseAt(all, first, second, twinFirst, twinSecond []int64, p float64) Noise {
	x := float64(stats.Percentile(all, p))
	if x <= 0 {
		return Noise{Count: len(all)}
	}
	sd := stats.BootstrapSD(all, p)
	n := Noise{Sampling: sd / x, Count: len(all)}
	if len(first) > 0 && len(second) > 0 {
		d := float64(stats.Percentile(first, p) - stats.Percentile(second, p))
		if len(twinFirst) > 0 && len(twinSecond) > 0 {
			d -= float64(stats.Percentile(twinFirst, p) - stats.Percentile(twinSecond, p))
		}
		n.Drift = math.Sqrt(max(0, d*d-4*sd*sd)) / x
	}
	return n
}

// values are the i-th metric's values over reqs in nanoseconds,
// ascending: each request's, or for ITL every inter-token gap.
func values(reqs []request, i int) []int64 {
	var out []int64
	for _, q := range reqs {
		switch {
		case Metrics[i] == latency.ITL:
			out = append(out, q.gaps...)
		case q.has[i]:
			out = append(out, q.v[i])
		}
	}
	slices.Sort(out)
	return out
}
