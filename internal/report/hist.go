package report

import "math/bits"

// logHist counts non-negative values in log-linear buckets: exact below
// 1,024, and above it 1,024 buckets per power of two, so a value read back
// (the bucket's midpoint) is within 0.05 % of every value counted in it.
// It holds inter-token latencies once there are too many to keep one by one.
type logHist struct {
	counts []int64
	n      int64
	lo, hi int // range of indices touched since the last clear (hi exclusive)
}

const histSub = 1024

func histIndex(v int64) int {
	if v < histSub {
		return int(max(v, 0))
	}
	e := bits.Len64(uint64(v)) - 11 // shift leaving v>>e in [1024, 2048)
	return histSub + e*histSub + int(v>>e) - histSub
}

func histValue(i int) int64 {
	if i < histSub {
		return int64(i)
	}
	e := (i - histSub) / histSub
	lo := int64(histSub+(i-histSub)%histSub) << e
	return lo + (int64(1)<<e)/2
}

func (h *logHist) add(v int64) {
	i := histIndex(v)
	if i >= len(h.counts) {
		h.counts = append(h.counts, make([]int64, i+1-len(h.counts))...)
	}
	if h.n == 0 {
		h.lo, h.hi = i, i+1
	} else {
		h.lo, h.hi = min(h.lo, i), max(h.hi, i+1)
	}
	h.counts[i]++
	h.n++
}

// clear empties h, keeping its storage.
func (h *logHist) clear() {
	if h.n > 0 {
		clear(h.counts[h.lo:h.hi])
	}
	h.n, h.lo, h.hi = 0, 0, 0
}

// merge adds o's counts to h.
func (h *logHist) merge(o *logHist) {
	if o.n == 0 {
		return
	}
	if o.hi > len(h.counts) {
		h.counts = append(h.counts, make([]int64, o.hi-len(h.counts))...)
	}
	for i := o.lo; i < o.hi; i++ {
		h.counts[i] += o.counts[i]
	}
	if h.n == 0 {
		h.lo, h.hi = o.lo, o.hi
	} else {
		h.lo, h.hi = min(h.lo, o.lo), max(h.hi, o.hi)
	}
	h.n += o.n
}

// percentile is the nearest-rank percentile p, read as its bucket's midpoint.
func (h *logHist) percentile(p float64) int64 {
	if h.n == 0 {
		return 0
	}
	k := ceilRank(p, h.n)
	var c int64
	for i, x := range h.counts {
		c += x
		if c >= k {
			return histValue(i)
		}
	}
	return histValue(len(h.counts) - 1)
}

// mean of the counted values, from bucket midpoints.
func (h *logHist) mean() float64 {
	if h.n == 0 {
		return 0
	}
	var s float64
	for i, x := range h.counts {
		if x > 0 {
			s += float64(x) * float64(histValue(i))
		}
	}
	return s / float64(h.n)
}

// ceilRank is rank for an int64 count.
func ceilRank(p float64, n int64) int64 { return int64(rank(p, int(n))) }

// gaps holds a large sample (inter-token or inter-chunk gaps): one by one
// up to exactCap values, then in a logHist.
type gaps struct {
	exact    []int64
	hist     *logHist
	n        int64
	exactCap int
}

// merge adds a batch of values: vs one by one (nil when the batch kept
// none) and oh, when oh.n > 0, the same values as a histogram, merged by
// bucket once the sample has left exact mode.
func (g *gaps) merge(vs []int64, oh *logHist) {
	if g.hist == nil && len(g.exact)+len(vs) <= g.exactCap && (oh == nil || oh.n == int64(len(vs))) {
		g.exact = append(g.exact, vs...)
		g.n += int64(len(vs))
		return
	}
	if oh != nil && oh.n > 0 {
		if g.hist == nil {
			g.toHist()
		}
		g.hist.merge(oh)
		g.n += oh.n
		return
	}
	for _, v := range vs {
		g.add(v)
	}
}

// snapshot is a copy that later additions to g do not change.
func (g gaps) snapshot() gaps {
	if g.hist != nil {
		h := *g.hist
		h.counts = append([]int64(nil), g.hist.counts...)
		g.hist = &h
	}
	g.exact = g.exact[:len(g.exact):len(g.exact)]
	return g
}

// toHist moves the exact values into the histogram.
func (g *gaps) toHist() {
	g.hist = &logHist{}
	for _, x := range g.exact {
		g.hist.add(x)
	}
	g.exact = nil
}

func (g *gaps) add(v int64) {
	g.n++
	if g.hist != nil {
		g.hist.add(v)
		return
	}
	g.exact = append(g.exact, v)
	if len(g.exact) > g.exactCap {
		g.toHist()
	}
}
