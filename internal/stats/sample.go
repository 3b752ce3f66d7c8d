package stats

import "slices"

// Sample holds a metric's values one by one up to a cap, so its
// percentiles are exact, and moves them into a [Histogram] once there are
// more, so its memory stops growing. The zero value is empty and ready to
// use.
type Sample struct {
	// ExactCap is how many values are kept one by one; 0 means
	// DefaultExactCap. Set it before the first value.
	ExactCap int

	values []int64
	hist   *Histogram
	spare  *Histogram // a histogram emptied by Reset, for the next toHist
	n, sum int64
}

// DefaultExactCap is how many values a Sample keeps one by one unless told
// otherwise: 512 KiB of values.
const DefaultExactCap = 1 << 16

func (s *Sample) exactCap() int {
	if s.ExactCap <= 0 {
		return DefaultExactCap
	}
	return s.ExactCap
}

// Add adds one value.
func (s *Sample) Add(v int64) {
	s.n++
	s.sum = addSat(s.sum, max(v, 0))
	if s.hist != nil {
		s.hist.Add(v)
		return
	}
	if len(s.values) == s.exactCap() {
		s.toHist()
		s.hist.Add(v)
		return
	}
	s.reserve(1)
	s.values = append(s.values, v)
}

// reserve makes room for n more values kept one by one, doubling the
// storage (never past the cap) where append would grow a large slice by a
// quarter: what a growing sample allocates is at most twice the storage
// it ends with, not five times.
func (s *Sample) reserve(n int) {
	need := len(s.values) + n
	if need <= cap(s.values) {
		return
	}
	c := max(need, 2*cap(s.values), 64)
	c = min(c, max(need, s.exactCap()))
	grown := make([]int64, len(s.values), c)
	copy(grown, s.values)
	s.values = grown
}

// AddBatch adds a batch of values given one by one (vs) and, when h is not
// nil, the same values as a histogram (a batch reduced elsewhere, for
// instance in parallel): while the sample is exact it keeps vs, once it
// counts in a histogram it merges h bucket by bucket. Either form may be
// left out (vs nil, or h nil) when the caller knows which one the sample
// needs; h, when given, must hold exactly the values of vs when vs is not
// empty.
func (s *Sample) AddBatch(vs []int64, h *Histogram) {
	if h != nil && h.n == 0 && len(vs) > 0 {
		h = nil // an empty histogram beside values: the values alone
	}
	if s.hist == nil && len(s.values)+len(vs) <= s.exactCap() && (h == nil || h.n == int64(len(vs))) {
		s.reserve(len(vs))
		s.values = append(s.values, vs...)
		s.n += int64(len(vs))
		for _, v := range vs {
			s.sum = addSat(s.sum, max(v, 0))
		}
		return
	}
	if h != nil && h.n > 0 {
		if s.hist == nil {
			s.toHist()
		}
		s.hist.Merge(h)
		s.n += h.n
		s.sum = addSat(s.sum, h.sum)
		return
	}
	if s.hist != nil {
		s.hist.AddAll(vs)
		s.n += int64(len(vs))
		for _, v := range vs {
			s.sum = addSat(s.sum, max(v, 0))
		}
		return
	}
	for _, v := range vs {
		s.Add(v)
	}
}

// Reset empties s, keeping the storage of the values it kept one by one
// and of its histogram: it counts exactly again, up to ExactCap values.
func (s *Sample) Reset() {
	if s.hist != nil {
		s.hist.Reset()
		s.spare = s.hist
	}
	s.values, s.hist, s.n, s.sum = s.values[:0], nil, 0, 0
}

// toHist moves the values kept one by one into the histogram.
func (s *Sample) toHist() {
	s.hist, s.spare = s.spare, nil
	if s.hist == nil {
		s.hist = &Histogram{}
	}
	for _, v := range s.values {
		s.hist.Add(v)
	}
	s.values = nil
}

// Count is the number of values added.
func (s *Sample) Count() int64 { return s.n }

// Mean is the exact mean of the values added (negative values count as 0,
// as in a histogram); 0 when empty.
func (s *Sample) Mean() float64 {
	if s.n == 0 {
		return 0
	}
	return float64(s.sum) / float64(s.n)
}

// Values returns the values kept one by one, in the order added; nil once
// the sample counts in a histogram. The caller must not modify them.
func (s *Sample) Values() []int64 { return s.values }

// Hist returns the histogram the sample counts in, nil while it is exact.
func (s *Sample) Hist() *Histogram { return s.hist }

// Percentiles returns the nearest-rank percentiles ps of the values added:
// exact while they are kept one by one (approx false), else read from the
// histogram within [RelativeError] (approx true). Zeros when empty.
func (s *Sample) Percentiles(ps ...float64) (vals []int64, approx bool) {
	vals = make([]int64, len(ps))
	if s.hist != nil {
		for i, p := range ps {
			vals[i] = s.hist.Percentile(p)
		}
		return vals, true
	}
	sorted := slices.Clone(s.values)
	slices.Sort(sorted)
	for i, p := range ps {
		vals[i] = Percentile(sorted, p)
	}
	return vals, false
}

// Snapshot returns a copy of s that later additions to s do not change.
func (s *Sample) Snapshot() Sample {
	c := *s
	c.spare = nil // s's own
	if s.hist != nil {
		c.hist = s.hist.Clone()
	}
	c.values = s.values[:len(s.values):len(s.values)]
	return c
}
