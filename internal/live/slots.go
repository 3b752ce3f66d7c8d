package live

import (
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/stats"
	"github.com/tokentrace/tokentrace/internal/window"
)

// slotWidth is the width of one slot of the sliding window: a slot is one
// of internal/window's windows of width 1 s (aligned at the run's start, a
// request in the one its completion falls in).
const slotWidth = time.Second

// metricNames are the latency metrics the board follows, in display order.
var metricNames = [...]latency.Metric{latency.TTFT, latency.TPOT, latency.ITL, latency.E2E}

// slot is what completed in one second of the run.
type slot struct {
	sec      int // the window it holds (window.Index); -1: empty
	hist     [len(metricNames)]stats.Sketch
	ok, fail int64
	kinds    map[string]int64
	parts    map[string]int64 // stage → Σ ns over the slot's successful requests
	split    int64            // requests whose path was split
}

func (s *slot) reset(sec int) {
	s.sec, s.ok, s.fail, s.split = sec, 0, 0, 0
	for i := range s.hist {
		s.hist[i].Reset()
	}
	clear(s.kinds)
	clear(s.parts)
}

// slots is a ring of one-second windows: the requests that completed in
// the last n of them (the current one included).
type slots struct {
	slots []slot
	itl   []int64 // scratch for a record's gaps
	// gaps, when set, returns a record's inter-token gaps already
	// computed (the report collector's, as it took the record in).
	gaps  func(*latency.Record) ([]int64, bool)
	path  latency.PathScratch
	names map[partKey]string // the parts' labels, made once each
	// own: a record's split is its Timing (the gateway's own stages),
	// not its Path.
	own bool
	// lean: TTFT and E2E only, no split (a gateway's pool or upstream
	// row, which shows no more).
	lean bool
}

// partKey is a part of a path by its hop and stage.
type partKey struct {
	hop  latency.Hop
	name string
}

func newSlots(width time.Duration) *slots {
	n := max(int((width+slotWidth-1)/slotWidth), 1)
	w := &slots{slots: make([]slot, n), names: map[partKey]string{}}
	for i := range w.slots {
		w.slots[i].sec = -1
		w.slots[i].kinds = map[string]int64{}
		w.slots[i].parts = map[string]int64{}
	}
	return w
}

// add counts rec in the slot of its completion (window.Completion); a
// warm-up record, or one older than the ring, is left out, as
// window.Series leaves warm-up out.
func (w *slots) add(rec *latency.Record) {
	if rec.Warmup {
		return
	}
	sec := window.Index(window.Completion(rec), slotWidth)
	s := &w.slots[sec%len(w.slots)]
	switch {
	case s.sec > sec:
		return
	case s.sec < sec:
		s.reset(sec)
	}
	if kind := failKind(rec); kind != "" {
		s.fail++
		s.kinds[string(kind)]++
		return
	}
	s.ok++
	for i, m := range metricNames {
		if w.lean && (m == latency.ITL || m == latency.TPOT) {
			continue
		}
		if m == latency.ITL {
			s.hist[i].AddAll(w.itlsOf(rec))
			continue
		}
		if d, ok := rec.Value(m); ok {
			s.hist[i].Add(int64(d))
		}
	}
	if w.lean {
		return
	}
	if w.own {
		w.ownStages(s, rec)
	} else if p, ok := w.path.Path(rec); ok {
		s.split++
		for _, part := range p.Parts {
			k := partKey{part.Hop, part.Name}
			name, seen := w.names[k]
			if !seen {
				name = partName(part)
				w.names[k] = name
			}
			s.parts[name] += part.NS
		}
	}
}

// itlsOf returns rec's inter-token gaps: the ones w.gaps has, else
// computed into w's scratch.
func (w *slots) itlsOf(rec *latency.Record) []int64 {
	if w.gaps != nil {
		if g, ok := w.gaps(rec); ok {
			return g
		}
	}
	w.itl = rec.ITLs(w.itl[:0])
	return w.itl
}

// failKind is why rec failed, "" for a success: a success without an end
// fails as window.NoEnd, as the report counts it.
func failKind(rec *latency.Record) latency.ErrorKind {
	switch {
	case rec.ErrorKind != "":
		return rec.ErrorKind
	case rec.EndNS == 0:
		return window.NoEnd
	}
	return ""
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
	hist     [len(metricNames)]stats.Sketch
	ok, fail int64
	kinds    map[string]int64
	parts    map[string]int64
	split    int64
}

// merge sums the slots of the n seconds up to now into dst (reset first).
func (w *slots) merge(now int64, dst *windowStats) {
	for i := range dst.hist {
		dst.hist[i].Reset()
	}
	dst.ok, dst.fail, dst.split = 0, 0, 0
	if dst.kinds == nil {
		dst.kinds, dst.parts = map[string]int64{}, map[string]int64{}
	}
	clear(dst.kinds)
	clear(dst.parts)
	sec := window.Index(time.Duration(now), slotWidth)
	for k := range w.slots {
		s := &w.slots[k]
		if s.sec < 0 || s.sec > sec || s.sec <= sec-len(w.slots) {
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
