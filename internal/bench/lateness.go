package bench

import (
	"context"
	"fmt"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokentrace/tokentrace/internal/stats"
)

// The self-lateness watch (docs/metrics.md, "The client's own timekeeping").
const (
	// TickPeriod is how often the watch asks to be woken: a stall of the
	// process longer than TickPeriod + StallThreshold is always seen.
	TickPeriod = 5 * time.Millisecond
	// StallThreshold is the lateness of a wake-up past which the interval
	// counts as one where bench could not keep time.
	StallThreshold = 5 * time.Millisecond
	// maxStallsKept bounds the intervals summary.json lists (the worst).
	maxStallsKept = 20
	// maxStallWarnings is how many intervals the warnings name (the
	// worst); one more warning counts the rest.
	maxStallWarnings = 1
)

// Stall is an interval in which bench could not keep time: its ticker was
// due at FromNS (on the run's clock, as the records' instants) and woke at
// ToNS, LateMS late.
type Stall struct {
	FromNS int64   `json:"from_ns"`
	ToNS   int64   `json:"to_ns"`
	LateMS float64 `json:"late_ms"`
	// GCCycles is how many garbage collections ended between the tick
	// before and this one: 0 means the process was not running (the
	// machine's scheduler or a stop), not the GC.
	GCCycles int64 `json:"gc_cycles"`
}

// Timekeeping is what the watch measured over the run.
type Timekeeping struct {
	// Ticks is the number of wake-ups; TickLate* the lateness of each
	// (woken − due), nearest-rank P50 and P99 from the histogram, exact max.
	Ticks          int64   `json:"ticks"`
	TickLateP50MS  float64 `json:"tick_late_p50_ms"`
	TickLateP99MS  float64 `json:"tick_late_p99_ms"`
	TickLateMaxMS  float64 `json:"tick_late_max_ms"`
	StallCount     int     `json:"stall_count"`
	StallTotalMS   float64 `json:"stall_total_ms"`
	Stalls         []Stall `json:"stalls,omitempty"` // the worst maxStallsKept, in time order
	TickPeriodMS   float64 `json:"tick_period_ms"`
	StallThreshold float64 `json:"stall_threshold_ms"`
}

// lateness is the watch's state: it ticks on the run's clock every period
// while a request is in flight and records how late each wake-up came.
// With nothing in flight it sleeps (a stall then delays no request's
// instants; an open-loop send it delays is client_queue, measured on its
// own) and costs no CPU.
type lateness struct {
	clock     Clock
	period    time.Duration
	threshold time.Duration
	gc        func() uint64 // completed GC cycles so far
	busy      atomic.Int64  // requests in flight (begin, end)
	wake      chan struct{} // a request was sent while none was in flight

	mu     sync.Mutex
	late   stats.Histogram
	ticks  int64
	stalls []Stall
	count  int
	total  int64
}

func newLateness(clock Clock) *lateness {
	return &lateness{clock: clock, period: TickPeriod, threshold: StallThreshold, gc: gcCycles(), wake: make(chan struct{}, 1)}
}

// begin notes a request sent: the watch ticks from the first in flight.
func (l *lateness) begin() {
	if l.busy.Add(1) == 1 {
		select {
		case l.wake <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
}

// end notes a request finished.
func (l *lateness) end() { l.busy.Add(-1) }

// waitBusy returns true once a request is in flight, false when ctx ends
// first.
func (l *lateness) waitBusy(ctx context.Context) bool {
	for l.busy.Load() == 0 {
		select {
		case <-ctx.Done():
			return false
		case <-l.wake:
		}
	}
	return true
}

// gcCycles returns a reader of the runtime's completed GC cycles that does
// not allocate.
func gcCycles() func() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	return func() uint64 {
		metrics.Read(s)
		if s[0].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[0].Value.Uint64()
	}
}

// observe notes a wake-up due at due that came at woke, with gcs GC cycles
// ended since the previous one.
func (l *lateness) observe(due, woke int64, gcs uint64) {
	d := max(woke-due, 0)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ticks++
	l.late.Add(d)
	if d <= int64(l.threshold) {
		return
	}
	l.count++
	l.total += d
	s := Stall{FromNS: due, ToNS: woke, LateMS: float64(d) / 1e6, GCCycles: int64(gcs)}
	if len(l.stalls) < maxStallsKept {
		l.stalls = append(l.stalls, s)
		return
	}
	// Keep the worst: replace the least late when this one is later.
	k := 0
	for i := range l.stalls {
		if l.stalls[i].LateMS < l.stalls[k].LateMS {
			k = i
		}
	}
	if s.LateMS > l.stalls[k].LateMS {
		l.stalls = append(slices.Delete(l.stalls, k, k+1), s)
	}
}

// run ticks while requests are in flight until ctx ends. Ticks are due at
// absolute instants; after a stall the ticks it swallowed are skipped, not
// counted late one by one. Once nothing is in flight after a tick it waits
// for the next send, and starts over from it.
func (l *lateness) run(ctx context.Context) {
	tm := time.NewTimer(l.period)
	defer tm.Stop()
	var due int64
	var gc0 uint64
	idle := true
	for {
		if idle {
			if !l.waitBusy(ctx) {
				return
			}
			due, gc0 = int64(l.clock.Now())+int64(l.period), l.gc()
		}
		tm.Reset(time.Duration(due - int64(l.clock.Now())))
		select {
		case <-ctx.Done():
			return
		case <-tm.C:
		}
		woke := int64(l.clock.Now())
		gc1 := l.gc()
		l.observe(due, woke, gc1-gc0)
		gc0 = gc1
		due += int64(l.period)
		if due <= woke {
			due = woke + int64(l.period) - (woke-due)%int64(l.period)
		}
		idle = l.busy.Load() == 0
	}
}

// start runs the watch until the returned function is called.
func (l *lateness) start(ctx context.Context) (stop func()) {
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.run(wctx)
	}()
	return func() { cancel(); <-done }
}

// result is what the watch measured.
func (l *lateness) result() Timekeeping {
	l.mu.Lock()
	defer l.mu.Unlock()
	tk := Timekeeping{Ticks: l.ticks, StallCount: l.count, StallTotalMS: float64(l.total) / 1e6,
		Stalls: slices.Clone(l.stalls), TickPeriodMS: ms(int64(l.period)), StallThreshold: ms(int64(l.threshold))}
	if l.ticks > 0 {
		tk.TickLateP50MS, tk.TickLateP99MS = ms(l.late.Percentile(50)), ms(l.late.Percentile(99))
		tk.TickLateMaxMS = ms(l.late.Max())
	}
	slices.SortFunc(tk.Stalls, func(a, b Stall) int { return int(a.FromNS - b.FromNS) })
	return tk
}

// warnings words the intervals in which bench could not keep time: the
// worst few by name, then how many more.
func (tk Timekeeping) warnings() []string {
	if tk.StallCount == 0 {
		return nil
	}
	worst := slices.Clone(tk.Stalls)
	slices.SortStableFunc(worst, func(a, b Stall) int {
		switch {
		case a.LateMS > b.LateMS:
			return -1
		case a.LateMS < b.LateMS:
			return 1
		}
		return 0
	})
	var out []string
	for _, s := range worst[:min(len(worst), maxStallWarnings)] {
		cause := "no GC cycle ended in it: the process was not running (the machine's scheduler, or a stop)"
		if s.GCCycles > 0 {
			cause = fmt.Sprintf("%d GC cycle(s) ended in it", s.GCCycles)
		}
		out = append(out, fmt.Sprintf("bench could not keep time from %.3f s to %.3f s of the run: its %s ticker woke %.1f ms late (%s); "+
			"requests in flight then carry up to that much of the client's own delay",
			float64(s.FromNS)/1e9, float64(s.ToNS)/1e9, time.Duration(tk.TickPeriodMS*1e6), s.LateMS, cause))
	}
	if more := tk.StallCount - len(out); more > 0 {
		out = append(out, fmt.Sprintf("bench could not keep time in %d more interval(s) (over %.0f ms late; %.1f ms in all; summary.json client.timekeeping)",
			more, tk.StallThreshold, tk.StallTotalMS))
	}
	return out
}
