package route

import (
	"math"
	"testing"
	"time"
)

// feedWindow gives c one window of n samples, 1/n s apart from t (so the
// last one closes it), each with upstream TTFT ttft and inflight admitted,
// and returns the limit after it.
func feedWindow(c *gradientLimiter, q Limits, limit float64, t time.Time, n int, ttft time.Duration, inflight int) float64 {
	for i := range n {
		limit = c.next(q, limit, limitSample{now: t.Add(time.Duration(i) * time.Second / time.Duration(n-1)), upstream: ttft, inflight: inflight})
	}
	return limit
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestGradientGrowsWithoutQueueing(t *testing.T) {
	q := Limits{Concurrency: 16, MinConcurrency: 1, MaxConcurrency: 64}
	c := &gradientLimiter{}
	t0 := time.Unix(1000, 0)
	// One window of 20 ms TTFTs at the limit: long = short = 20 ms, g = 1,
	// L' = 0.8·16 + 0.2·(16 + √16) = 16.8.
	l := feedWindow(c, q, 16, t0, 10, 20*time.Millisecond, 16)
	if !near(l, 16.8) {
		t.Fatalf("after a window without queueing: limit %v, want 16.8", l)
	}
	if !near(c.long, 20e6) {
		t.Errorf("long-term TTFT %v ns, want 20e6", c.long)
	}
	// Second window: L' = 16.8 + 0.2·√16.8.
	l = feedWindow(c, q, l, t0.Add(2*time.Second), 10, 20*time.Millisecond, 16)
	if want := 16.8 + 0.2*math.Sqrt(16.8); !near(l, want) {
		t.Errorf("second window: limit %v, want 16.8 + 0.2·√16.8 = %v", l, want)
	}
}

func TestGradientWindow(t *testing.T) {
	q := Limits{Concurrency: 16, MinConcurrency: 1, MaxConcurrency: 64}
	t0 := time.Unix(1000, 0)
	// Nine samples over a second: too few to close a window.
	c := &gradientLimiter{}
	l := 16.0
	for i := range 9 {
		l = c.next(q, l, limitSample{now: t0.Add(time.Duration(i) * 200 * time.Millisecond), upstream: 20 * time.Millisecond, inflight: 16})
	}
	if l != 16 {
		t.Errorf("after 9 samples over 1.6 s: limit %v, want 16 (window still open)", l)
	}
	// Fifty samples within half a second: too short to close a window.
	c = &gradientLimiter{}
	for i := range 50 {
		l = c.next(q, l, limitSample{now: t0.Add(time.Duration(i) * 10 * time.Millisecond), upstream: 20 * time.Millisecond, inflight: 16})
	}
	if l != 16 {
		t.Errorf("after 50 samples over 0.49 s: limit %v, want 16 (window still open)", l)
	}
}

func TestGradientCutsOnQueueing(t *testing.T) {
	q := Limits{Concurrency: 16, MinConcurrency: 1, MaxConcurrency: 64}
	c := &gradientLimiter{long: 20e6, n: gradientWarmup} // learnt: 20 ms without queueing
	t0 := time.Unix(1000, 0)
	// A window of 30 ms: long' = 20 + (30 − 20)·2/601 ms, g = long'/30,
	// L' = 0.8·16 + 0.2·(g·16 + 4).
	l := feedWindow(c, q, 16, t0, 10, 30*time.Millisecond, 16)
	long := 20e6 + 10e6*2/601
	g := long / 30e6
	if want := 0.8*16 + 0.2*(g*16+4); !near(l, want) || !near(c.long, long) {
		t.Errorf("30 ms against 20 ms: limit %v long %v, want %v %v", l, c.long, want, long)
	}
	// Queueing three times the baseline: g is held at 0.5 (at most halved
	// per window before smoothing): L' = 0.8·16 + 0.2·(8 + 4) = 15.2.
	c = &gradientLimiter{long: 20e6, n: gradientWarmup}
	if l := feedWindow(c, q, 16, t0, 10, 60*time.Millisecond, 16); !near(l, 15.2) {
		t.Errorf("60 ms against 20 ms: limit %v, want 15.2", l)
	}
	// The equilibrium: g·L + √L = L, i.e. g = 0.75 at L = 16, holds the limit.
	c = &gradientLimiter{long: 30e6, n: gradientWarmup}
	short := 30e6 / 0.75 // 40 ms; long moves by (40 − 30)·2/601 ms
	l = feedWindow(c, q, 16, t0, 10, time.Duration(short), 16)
	want := 0.8*16 + 0.2*((30e6+10e6*2/601)/short*16+4)
	if !near(l, want) || math.Abs(l-16) > 0.01 {
		t.Errorf("at the equilibrium: limit %v, want %v ≈ 16", l, want)
	}
}

func TestGradientLoadBoundAndBinding(t *testing.T) {
	q := Limits{Concurrency: 16, MinConcurrency: 1, MaxConcurrency: 64}
	t0 := time.Unix(1000, 0)
	// Fewer than half the slots used: the limit does not move, even on slow TTFTs.
	c := &gradientLimiter{long: 20e6, n: gradientWarmup}
	if l := feedWindow(c, q, 16, t0, 10, 80*time.Millisecond, 7); l != 16 {
		t.Errorf("7 of 16 slots used, slow TTFT: limit %v, want 16", l)
	}
	// Half or more used but the limit never reached: no growth...
	c = &gradientLimiter{long: 20e6, n: gradientWarmup}
	if l := feedWindow(c, q, 16, t0, 10, 20*time.Millisecond, 12); l != 16 {
		t.Errorf("12 of 16 slots used, fast TTFT: limit %v, want 16 (no growth)", l)
	}
	// ...but cuts still apply.
	c = &gradientLimiter{long: 20e6, n: gradientWarmup}
	if l := feedWindow(c, q, 16, t0, 10, 60*time.Millisecond, 12); !near(l, 15.2) {
		t.Errorf("12 of 16 slots used, TTFT 3× the baseline: limit %v, want 15.2", l)
	}
}

func TestGradientDropsCeilingAndHint(t *testing.T) {
	q := Limits{Concurrency: 16, MinConcurrency: 1, MaxConcurrency: 64}
	t0 := time.Unix(1000, 0)
	// A drop in the window: g = 0.5 whatever the TTFTs: 15.2.
	c := &gradientLimiter{long: 20e6, n: gradientWarmup}
	l := 16.0
	for i := range 10 {
		l = c.next(q, l, limitSample{now: t0.Add(time.Duration(i) * 112 * time.Millisecond), upstream: 20 * time.Millisecond, inflight: 16, drop: i == 3})
	}
	if !near(l, 15.2) {
		t.Errorf("a window with a drop: limit %v, want 15.2", l)
	}
	// Only drops in a window: still a cut, and the averages are untouched.
	c = &gradientLimiter{long: 20e6, n: gradientWarmup}
	l = 16
	for i := range 10 {
		l = c.next(q, l, limitSample{now: t0.Add(time.Duration(i) * 112 * time.Millisecond), drop: true, inflight: 16})
	}
	if !near(l, 15.2) || c.long != 20e6 || c.n != gradientWarmup {
		t.Errorf("a window of drops: limit %v long %v n %d, want 15.2 20e6 %d", l, c.long, c.n, gradientWarmup)
	}
	// A ceiling (target_ttft) below the window's mean: g = 0.5 although
	// the TTFT equals the long-term average.
	qc := q
	qc.TargetTTFT = 15 * time.Millisecond
	c = &gradientLimiter{long: 20e6, n: gradientWarmup}
	if l := feedWindow(c, qc, 16, t0, 10, 20*time.Millisecond, 16); !near(l, 15.2) {
		t.Errorf("20 ms above a 15 ms target_ttft: limit %v, want 15.2", l)
	}
	qc.TargetTTFT = 25 * time.Millisecond
	c = &gradientLimiter{long: 20e6, n: gradientWarmup}
	if l := feedWindow(c, qc, 16, t0, 10, 20*time.Millisecond, 16); !near(l, 16.8) {
		t.Errorf("20 ms within a 25 ms target_ttft: limit %v, want 16.8", l)
	}
	// Fresh upstream figures of waiting requests stop the growth.
	c = &gradientLimiter{long: 20e6, n: gradientWarmup}
	l = 16
	for i := range 10 {
		l = c.next(q, l, limitSample{now: t0.Add(time.Duration(i) * 112 * time.Millisecond), upstream: 20 * time.Millisecond, inflight: 16, upstreamQueued: i == 9})
	}
	if l != 16 {
		t.Errorf("upstream queueing reported: limit %v, want 16 (no growth)", l)
	}
}

func TestGradientRecoveryAndBounds(t *testing.T) {
	q := Limits{Concurrency: 16, MinConcurrency: 6, MaxConcurrency: 16}
	t0 := time.Unix(1000, 0)
	// Long-term average polluted by a long overload (200 ms) and TTFT back
	// at 20 ms: long' = 200 + (20 − 200)·2/601 ms, then × 0.9 as it is
	// more than twice the window's mean.
	c := &gradientLimiter{long: 200e6, n: 50}
	l := feedWindow(c, q, 16, t0, 10, 20*time.Millisecond, 16)
	if want := (200e6 - 180e6*2/601) * 0.9; !near(c.long, want) {
		t.Errorf("long after recovery %v, want %v", c.long, want)
	}
	if l != 16 {
		t.Errorf("limit %v, want the maximum 16", l)
	}
	// Never below the minimum (6.5 → 6.36 → … → 5.94 → 6).
	c = &gradientLimiter{long: 20e6, n: gradientWarmup}
	l = 6.5
	for w := range 8 {
		l = feedWindow(c, q, l, t0.Add(time.Duration(2*w)*time.Second), 10, time.Second, 16)
	}
	if l != 6 {
		t.Errorf("after eight slow windows: limit %v, want the minimum 6", l)
	}
}

// TestQueueAdaptive drives a Queue's controller through its methods: the
// time a request waited in the queue is not an input at all, a window of
// drops cuts, a fresh upstream hint of waiting requests stops growth and a
// stale one is ignored, and a fixed limit only learns the TTFT.
func TestQueueAdaptive(t *testing.T) {
	l := Limits{Concurrency: 8, MinConcurrency: 1, MaxConcurrency: 32, Adaptive: true, MaxSize: 10}
	t0 := time.Unix(1000, 0)
	full := func(l Limits) *Queue[int] {
		q := NewQueue[int](l)
		for range 8 {
			if !q.TryAdmit() {
				t.Fatal("no slot")
			}
		}
		return q
	}
	window := func(feed func(now time.Time)) {
		for i := range 10 {
			feed(t0.Add(time.Duration(i) * 112 * time.Millisecond))
		}
	}
	q := full(l)
	window(func(now time.Time) { q.ObserveDrop(now) })
	if want := 0.8*8 + 0.2*(4+math.Sqrt(8)); !near(q.Limit(), want) {
		t.Errorf("after a window of drops: limit %v, want %v", q.Limit(), want)
	}
	for _, h := range []struct {
		name    string
		waiting float64
		fresh   bool
		grows   bool
	}{{"no hint", 0, false, true}, {"fresh, waiting", 3, true, false}, {"stale, waiting", 3, false, true}, {"fresh, none waiting", 0, true, true}} {
		q := full(l)
		var hint func(time.Time) (float64, bool)
		if h.name != "no hint" {
			hint = func(time.Time) (float64, bool) { return h.waiting, h.fresh }
		}
		window(func(now time.Time) { q.ObserveFirstToken(now, 20*time.Millisecond, hint) })
		want := 8.0
		if h.grows {
			want = 8 + 0.2*math.Sqrt(8)
		}
		if !near(q.Limit(), want) {
			t.Errorf("%s: limit %v, want %v", h.name, q.Limit(), want)
		}
	}
	fixed := l
	fixed.Adaptive = false
	q = full(fixed)
	window(func(now time.Time) { q.ObserveFirstToken(now, 20*time.Millisecond, nil) })
	if q.Limit() != 8 || q.ttft.n != 10 {
		t.Errorf("fixed limit: limit %v after %d samples, want 8 after 10", q.Limit(), q.ttft.n)
	}
	// A reload that keeps Concurrency and Adaptive keeps the limit (within
	// the new bounds) and what was learnt; one that changes Concurrency
	// starts over.
	q = full(l)
	window(func(now time.Time) { q.ObserveFirstToken(now, 20*time.Millisecond, nil) })
	learnt := q.ctl
	l2 := l
	l2.MaxConcurrency = 8
	q.Update(l2)
	if q.Limit() != 8 || q.ctl != learnt {
		t.Errorf("reload lowering the maximum: limit %v, controller kept %v; want 8, true", q.Limit(), q.ctl == learnt)
	}
	l2.Concurrency = 6
	q.Update(l2)
	if q.Limit() != 6 || q.ctl == learnt {
		t.Errorf("reload changing concurrency: limit %v, controller kept %v; want 6, false", q.Limit(), q.ctl == learnt)
	}
}
