package live

import (
	"slices"
	"strings"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// DefaultQueue is the gateway view's hand-off bound (Config.Queue when 0):
// records Offered beyond it, before the board's next tick drains them,
// are dropped and counted.
const DefaultQueue = 8192

// maxGroups bounds the pools and upstreams the gateway view follows; more
// are counted under OtherGroup.
const maxGroups = 64

// OtherGroup names the pools or upstreams beyond maxGroups.
const OtherGroup = "(other)"

// Labels are what a gateway knows of a finished request beyond its
// record: its pool ("" before one was chosen: an early reject), its
// upstream ("" when none answered), its status and whether the pool
// admitted it.
type Labels struct {
	Pool, Upstream string
	Status         int
	Admitted       bool
}

// PoolState is one pool's admission as the gateway reads it at a tick.
type PoolState struct {
	Pool     string  `json:"pool"`
	Queued   int     `json:"queued"`
	InFlight int     `json:"in_flight"`
	Limit    float64 `json:"limit"`
}

// Group is one pool's or upstream's figures: the last window's rate and
// percentiles, and its counts since start. For a pool, Queued, InFlight
// and Limit are its admission at the tick (Config.Pools).
type Group struct {
	Kind string `json:"kind"` // "pool" or "upstream"
	Name string `json:"name"`
	// The window.
	Requests int64   `json:"requests"`
	Failed   int64   `json:"failed"`
	RPS      float64 `json:"rps"`
	TTFTP50  float64 `json:"ttft_p50_ms"`
	TTFTP99  float64 `json:"ttft_p99_ms"`
	E2EP50   float64 `json:"e2e_p50_ms"`
	E2EP99   float64 `json:"e2e_p99_ms"`
	// Since start.
	Total      int64 `json:"total"`
	Admitted   int64 `json:"admitted"`
	Succeeded  int64 `json:"succeeded"`
	Refused429 int64 `json:"refused_429"`
	Refused503 int64 `json:"refused_503"`
	OtherFail  int64 `json:"other_failed"`
	// Now (pools only).
	Queued   int     `json:"queued"`
	InFlight int     `json:"in_flight"`
	Limit    float64 `json:"limit"`
}

// entry is one record in the hand-off, with its labels.
type entry struct {
	rec *latency.Record
	lab Labels
}

// groupKey is a group by its kind and name.
type groupKey struct{ kind, name string }

// group is one pool's or upstream's state on the board's goroutine.
type group struct {
	win *slots
	Group
}

// Offer hands over a gateway's finished record without waiting: when the
// hand-off already holds Config.Queue records it drops rec, counts it
// (Snapshot.Dropped) and returns false. rec must not change afterwards.
func (b *Board) Offer(rec *latency.Record, lab Labels) bool {
	b.mu.Lock()
	if len(b.batch) >= b.cfg.Queue {
		b.mu.Unlock()
		b.dropped.Add(1)
		return false
	}
	b.batch = append(b.batch, entry{rec, lab})
	b.queued.Store(int64(len(b.batch)))
	b.mu.Unlock()
	b.sent.Add(1)
	b.done.Add(1)
	if !rec.OK() {
		b.failed.Add(1)
	}
	return true
}

// Full reports, without waiting, whether the hand-off is full, so that a
// caller can skip building a record Offer would drop (Skip it instead).
func (b *Board) Full() bool { return b.queued.Load() >= int64(b.cfg.Queue) }

// Skip counts a record dropped because the hand-off was Full.
func (b *Board) Skip() { b.dropped.Add(1) }

// addGroups counts a gateway's record in its pool and its upstream.
func (a *aggregator) addGroups(e entry) {
	pool := e.lab.Pool
	if pool == "" {
		pool = "(none)"
	}
	a.groupOf("pool", pool).count(e)
	if e.lab.Upstream != "" {
		a.groupOf("upstream", e.lab.Upstream).count(e)
	}
}

// groupOf finds or makes a group (OtherGroup beyond maxGroups).
func (a *aggregator) groupOf(kind, name string) *group {
	k := groupKey{kind, name}
	if g, ok := a.groups[k]; ok {
		return g
	}
	if len(a.groups) >= maxGroups {
		name, k = OtherGroup, groupKey{kind, OtherGroup}
		if g, ok := a.groups[k]; ok {
			return g
		}
	}
	g := &group{win: newSlots(a.cfg.Window), Group: Group{Kind: kind, Name: name}}
	g.win.own, g.win.lean = true, true
	a.groups[k] = g
	return g
}

// count adds e to the group's window and totals.
func (g *group) count(e entry) {
	g.win.add(e.rec)
	g.Total++
	if e.lab.Admitted {
		g.Admitted++
	}
	switch {
	case e.rec.OK() && e.rec.EndNS != 0:
		g.Succeeded++
	case e.lab.Status == 429:
		g.Refused429++
	case e.lab.Status == 503:
		g.Refused503++
	default:
		g.OtherFail++
	}
}

// groupRows are the groups at instant now, pools first, each kind by
// name; a pool's admission is Config.Pools'.
func (a *aggregator) groupRows(now int64) []Group {
	if a.groups == nil {
		return nil
	}
	states := map[string]PoolState{}
	if a.cfg.Pools != nil {
		for _, p := range a.cfg.Pools() {
			states[p.Pool] = p
			a.groupOf("pool", p.Pool) // a pool with no request yet is shown
		}
	}
	span := min(a.cfg.Window, time.Duration(now)).Seconds()
	out := make([]Group, 0, len(a.groups))
	for _, g := range a.groups {
		g.win.merge(now, &a.gws)
		r := g.Group
		r.Requests, r.Failed = a.gws.ok+a.gws.fail, a.gws.fail
		if span > 0 {
			r.RPS = float64(a.gws.ok) / span
		}
		ttft, e2e := histMetric("", &a.gws.hist[0]), histMetric("", &a.gws.hist[3])
		r.TTFTP50, r.TTFTP99, r.E2EP50, r.E2EP99 = ttft.P50, ttft.P99, e2e.P50, e2e.P99
		if p, ok := states[r.Name]; ok && r.Kind == "pool" {
			r.Queued, r.InFlight, r.Limit = p.Queued, p.InFlight, p.Limit
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(x, y Group) int {
		if c := strings.Compare(y.Kind, x.Kind); c != 0 { // "upstream" after "pool"
			return -c
		}
		return strings.Compare(x.Name, y.Name)
	})
	return out
}

// ownStages adds a gateway record's own stages (its Timing, the gateway's
// partition of its time) to the slot's split.
func (w *slots) ownStages(s *slot, rec *latency.Record) {
	if len(rec.Timing) == 0 {
		return
	}
	s.split++
	for _, st := range rec.Timing {
		k := partKey{st.Hop, st.Name}
		name, seen := w.names[k]
		if !seen {
			name = partName(latency.PathPart{Hop: st.Hop, Name: st.Name})
			w.names[k] = name
		}
		s.parts[name] += st.NS
	}
}
