package live

import (
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// slotNS is the width of one slot of the sliding window.
const slotNS = int64(time.Second)

// metricNames are the latency metrics the board follows, in display order.
var metricNames = [...]latency.Metric{latency.TTFT, latency.TPOT, latency.ITL, latency.E2E}

// slot is what finished in one second of the run (by the record's end).
type slot struct {
	sec      int64 // the second it holds; -1: empty
	hist     [len(metricNames)]stats.Histogram
	ok, fail int64
	kinds    map[string]int64
	parts    map[string]int64 // stage → Σ ns over the slot's successful requests
	split    int64            // requests whose path was split
}

func (s *slot) reset(sec int64) {
	s.sec, s.ok, s.fail, s.split = sec, 0, 0, 0
	for i := range s.hist {
		s.hist[i].Reset()
	}
	clear(s.kinds)
	clear(s.parts)
}

// window is a ring of one-second slots: the records that ended in the last
// n seconds (the current one included).
type window struct {
	slots []slot
	itl   []int64 // scratch for a record's gaps
}

func newWindow(width time.Duration) *window {
	n := max(int((width+time.Second-1)/time.Second), 1)
	w := &window{slots: make([]slot, n)}
	for i := range w.slots {
		w.slots[i].sec = -1
		w.slots[i].kinds = map[string]int64{}
		w.slots[i].parts = map[string]int64{}
	}
	return w
}

// add counts rec in the slot of the second it ended in (at when it has no
// end); a record older than the window is left out.
func (w *window) add(rec *latency.Record, at int64) {
	if rec.EndNS > 0 {
		at = rec.EndNS
	}
	sec := max(at, 0) / slotNS
	s := &w.slots[sec%int64(len(w.slots))]
	switch {
	case s.sec > sec:
		return
	case s.sec < sec:
		s.reset(sec)
	}
	if !rec.OK() {
		s.fail++
		s.kinds[string(rec.ErrorKind)]++
		return
	}
	s.ok++
	for i, m := range metricNames {
		if m == latency.ITL {
			w.itl = rec.ITLs(w.itl[:0])
			for _, g := range w.itl {
				s.hist[i].Add(g)
			}
			continue
		}
		if d, ok := rec.Value(m); ok {
			s.hist[i].Add(int64(d))
		}
	}
	if p, ok := rec.Path(); ok {
		s.split++
		for _, part := range p.Parts {
			s.parts[partName(part)] += part.NS
		}
	}
}

// partName labels a part of a path: its hop and its stage ("server
// decode" for the server's server_decode).
func partName(p latency.PathPart) string {
	if p.Hop == "" {
		return p.Name
	}
	return string(p.Hop) + " " + strings.TrimPrefix(p.Name, string(p.Hop)+"_")
}

// windowStats is the window merged at second now.
type windowStats struct {
	hist     [len(metricNames)]stats.Histogram
	ok, fail int64
	kinds    map[string]int64
	parts    map[string]int64
	split    int64
}

// merge sums the slots of the n seconds up to now into dst (reset first).
func (w *window) merge(now int64, dst *windowStats) {
	for i := range dst.hist {
		dst.hist[i].Reset()
	}
	dst.ok, dst.fail, dst.split = 0, 0, 0
	if dst.kinds == nil {
		dst.kinds, dst.parts = map[string]int64{}, map[string]int64{}
	}
	clear(dst.kinds)
	clear(dst.parts)
	sec := max(now, 0) / slotNS
	for k := range w.slots {
		s := &w.slots[k]
		if s.sec < 0 || s.sec > sec || s.sec <= sec-int64(len(w.slots)) {
			continue
		}
		for i := range s.hist {
			dst.hist[i].Merge(&s.hist[i])
		}
		dst.ok += s.ok
		dst.fail += s.fail
		dst.split += s.split
		for kind, n := range s.kinds {
			dst.kinds[kind] += n
		}
		for p, ns := range s.parts {
			dst.parts[p] += ns
		}
	}
}
