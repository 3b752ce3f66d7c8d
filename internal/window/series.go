package window

import (
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// Series accumulates a run's windows. The zero value is not usable: make
// one with [New]. It is not safe for concurrent use.
type Series struct {
	width0  time.Duration // New's
	width   time.Duration
	maxWins int
	wins    []*acc        // nil: nothing in the window yet
	free    []*acc        // emptied by Reset or coarsen, storage kept, for the next windows
	last    time.Duration // the latest completion or scrape added
	itl     []int64       // scratch for a record's gaps
}

// acc is one window's running sums.
type acc struct {
	offered, completed, failed int
	failures                   map[latency.ErrorKind]int
	busy                       time.Duration // Σ overlap of [sent, completion) with the window
	ttft, tpot, itl, e2e       stats.Sample
	gauges                     int
	waiting, running, kv       float64
}

// exactCap is how many values of a metric a window keeps one by one before
// it counts them in a histogram (within stats.RelativeError): windows are
// many, so each keeps fewer than a run's sample does.
const exactCap = 1 << 12

// New returns an empty series of windows of width w. With maxWindows > 0
// the width doubles (adjacent windows merged, so windows stay aligned at
// the start) whenever the run would need more than maxWindows windows: a
// run of any length ends with at most maxWindows windows of width w·2ⁿ.
// With maxWindows ≤ 0 the width stays w. A width ≤ 0 counts as 1 s.
func New(w time.Duration, maxWindows int) *Series {
	if w <= 0 {
		w = time.Second
	}
	return &Series{width0: w, width: w, maxWins: maxWindows}
}

// Reset empties s, keeping its storage for the next records, with
// windows of width w (≤ 0: New's width).
func (s *Series) Reset(w time.Duration) {
	for _, a := range s.wins {
		s.release(a)
	}
	clear(s.wins)
	if w <= 0 {
		w = s.width0
	}
	s.wins, s.width, s.last = s.wins[:0], w, 0
}

// release empties a window's sums into the free list.
func (s *Series) release(a *acc) {
	if a != nil {
		a.reset()
		s.free = append(s.free, a)
	}
}

// reset empties a window's sums, keeping the samples' storage.
func (a *acc) reset() {
	a.offered, a.completed, a.failed, a.busy = 0, 0, 0, 0
	clear(a.failures)
	for _, x := range []*stats.Sample{&a.ttft, &a.tpot, &a.itl, &a.e2e} {
		x.Reset()
	}
	a.gauges, a.waiting, a.running, a.kv = 0, 0, 0, 0
}

// Width is the windows' width now (it may have doubled since New).
func (s *Series) Width() time.Duration { return s.width }

// Add counts one record. Warm-up records are left out.
func (s *Series) Add(r *latency.Record) {
	if r.Warmup {
		return
	}
	done := Completion(r)
	s.grow(max(done, time.Duration(r.IntendedNS)))
	s.at(time.Duration(r.IntendedNS)).offered++
	s.addBusy(time.Duration(r.SentNS), done)
	a := s.at(done)
	if kind := r.ErrorKind; kind != "" || r.EndNS == 0 {
		if kind == "" {
			kind = NoEnd
		}
		a.failed++
		if a.failures == nil {
			a.failures = map[latency.ErrorKind]int{}
		}
		a.failures[kind]++
		return
	}
	a.completed++
	if d, ok := r.TTFT(); ok {
		a.ttft.Add(int64(d))
	}
	if d, ok := r.TPOT(); ok {
		a.tpot.Add(int64(d))
	}
	if d, ok := r.E2E(); ok {
		a.e2e.Add(int64(d))
	}
	s.itl = r.ITLs(s.itl[:0])
	a.itl.AddBatch(s.itl, nil)
}

// Merge adds o's counts to s's, as if o's records and scrapes had been
// added to s; both must come from New with the same width. o may be left
// with its windows merged to s's width.
func (s *Series) Merge(o *Series) {
	for len(o.wins) > 0 {
		for s.width < o.width {
			s.coarsen()
		}
		for o.width < s.width {
			o.coarsen()
		}
		w := s.width
		s.grow(time.Duration(len(o.wins)-1) * s.width)
		if s.width == w {
			break
		}
	}
	for k, b := range o.wins {
		if b != nil {
			s.acc(k).merge(b)
		}
	}
	s.last = max(s.last, o.last)
}

// AddGauge counts one scrape of the server's gauges.
func (s *Series) AddGauge(g Gauge) {
	s.grow(g.At)
	a := s.at(g.At)
	a.gauges++
	a.waiting += g.Waiting
	a.running += g.Running
	a.kv += g.KVUsage
}

// Windows returns the windows from the start to end (exclusive; on the
// records' clock), the last one cut at end. With end ≤ 0 the series ends
// at the latest completion or scrape added. Nil when there is nothing.
func (s *Series) Windows(end time.Duration) []Window {
	if end <= 0 {
		end = s.last
	}
	if end <= 0 {
		return nil
	}
	n := Index(end-1, s.width) + 1
	out := make([]Window, n)
	for k := range out {
		w := &out[k]
		w.Start = time.Duration(k) * s.width
		w.End = min(w.Start+s.width, end)
		if k < len(s.wins) && s.wins[k] != nil {
			s.wins[k].fill(w)
		}
	}
	return out
}

// fill writes a window's figures from its sums.
func (a *acc) fill(w *Window) {
	span := (w.End - w.Start).Seconds()
	w.Offered, w.Completed, w.Failed = a.offered, a.completed, a.failed
	if len(a.failures) > 0 {
		w.Failures = make(map[latency.ErrorKind]int, len(a.failures))
		for k, v := range a.failures {
			w.Failures[k] = v
		}
	}
	w.OfferedRPS, w.AchievedRPS = float64(a.offered)/span, float64(a.completed)/span
	w.InFlight = a.busy.Seconds() / span
	w.TTFT, w.TPOT, w.ITL, w.E2E = percentiles(&a.ttft), percentiles(&a.tpot), percentiles(&a.itl), percentiles(&a.e2e)
	if a.gauges > 0 {
		n := float64(a.gauges)
		w.Gauges = Gauges{Samples: a.gauges, Waiting: a.waiting / n, Running: a.running / n, KVUsage: a.kv / n}
	}
}

// at returns the sums of t's window (grow has made room).
func (s *Series) at(t time.Duration) *acc { return s.acc(Index(t, s.width)) }

// acc returns window k's sums, taking them from the free list (or making
// them) the first time.
func (s *Series) acc(k int) *acc {
	if a := s.wins[k]; a != nil {
		return a
	}
	var a *acc
	if n := len(s.free); n > 0 {
		a, s.free = s.free[n-1], s.free[:n-1]
	} else {
		a = &acc{ttft: stats.Sample{ExactCap: exactCap}, tpot: stats.Sample{ExactCap: exactCap},
			itl: stats.Sample{ExactCap: exactCap}, e2e: stats.Sample{ExactCap: exactCap}}
	}
	s.wins[k] = a
	return a
}

// grow makes room for instant t: it doubles the width while t lies past
// maxWindows windows, then extends the windows to t's.
func (s *Series) grow(t time.Duration) {
	s.last = max(s.last, t)
	for s.maxWins > 0 && Index(t, s.width) >= s.maxWins {
		s.coarsen()
	}
	if k := Index(t, s.width); k >= len(s.wins) {
		s.wins = append(s.wins, make([]*acc, k+1-len(s.wins))...)
	}
}

// coarsen doubles the width, merging windows 2k and 2k+1 into k.
func (s *Series) coarsen() {
	s.width *= 2
	n := (len(s.wins) + 1) / 2
	for k := 0; k < n; k++ {
		a := s.wins[2*k]
		if 2*k+1 < len(s.wins) {
			if b := s.wins[2*k+1]; b != nil {
				if a == nil {
					a = b
				} else {
					a.merge(b) // b is dropped: a coarser series needs fewer windows
				}
			}
		}
		s.wins[k] = a
	}
	clear(s.wins[n:])
	s.wins = s.wins[:n]
}

// merge adds b's sums to a's.
func (a *acc) merge(b *acc) {
	a.offered += b.offered
	a.completed += b.completed
	a.failed += b.failed
	for k, v := range b.failures {
		if a.failures == nil {
			a.failures = map[latency.ErrorKind]int{}
		}
		a.failures[k] += v
	}
	a.busy += b.busy
	for _, p := range [][2]*stats.Sample{{&a.ttft, &b.ttft}, {&a.tpot, &b.tpot}, {&a.itl, &b.itl}, {&a.e2e, &b.e2e}} {
		p[0].AddBatch(p[1].Values(), p[1].Hist())
	}
	a.gauges += b.gauges
	a.waiting += b.waiting
	a.running += b.running
	a.kv += b.kv
}

// addBusy adds [from, to) to the windows' in-flight time.
func (s *Series) addBusy(from, to time.Duration) {
	from = max(from, 0)
	for k := Index(from, s.width); from < to; k++ {
		end := min(time.Duration(k+1)*s.width, to)
		s.acc(k).busy += end - from
		from = end
	}
}
