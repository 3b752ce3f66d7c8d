package route

import (
	"math"
	"time"
)

// The adaptive concurrency controller (Limits.Adaptive) learns from the
// upstream TTFT of the requests a Queue admitted: the time from leaving
// the queue to the upstream's first token. Time spent waiting in the queue
// itself is never part of the signal: that wait is the consequence of the
// limit, not a sign that the upstream is loaded, and feeding it back makes
// a limit shrink without end under overload (the lower the limit, the
// longer the queue, the lower the limit).

// limitSample is what the controller learns from one admitted request.
type limitSample struct {
	now time.Time
	// upstream is the request's upstream TTFT (admission → first token);
	// meaningless when drop is set.
	upstream time.Duration
	// drop: the request ended without a first token on an overload
	// answer (429, 503) or a timeout.
	drop bool
	// inflight is the number of admitted requests, this one included.
	inflight int
	// upstreamQueued: fresh figures from the upstreams show requests
	// waiting there (the hint passed to ObserveFirstToken).
	upstreamQueued bool
}

// gradientLimiter follows the gradient idea of Netflix's concurrency-limits
// (Gradient2): it compares the recent upstream TTFT with its long-term
// average, which stands for the upstream's TTFT without queueing. Samples
// are gathered in windows (at least gradientWindow long and
// gradientWindowSamples samples); at the end of each the limit moves once:
//
//	short = the window's mean upstream TTFT
//	g     = clamp(long / short, 0.5, 1)
//	        (0.5 when the window had a drop, or short > TargetTTFT when set)
//	L'    = (1−s)·L + s·(g·L + √L)          s = 0.2
//	        within [MinConcurrency, MaxConcurrency]
//
// so the limit grows by 0.2·√L per window while the upstream does not
// queue, and settles where g·L + √L = L: where queueing upstream makes the
// recent TTFT about L/(L−√L) times the long-term one (1.33× at L=16). An
// upstream whose concurrency is capped (vLLM's max-num-seqs) answers a
// request beyond the cap only after a running one finishes, a jump in TTFT
// far larger than that, so the limit stays near the cap. There is no
// absolute target: the controller finds the knee of the upstream it sits
// in front of. Updating once per window, not per sample, matters: a
// sample reports on a limit that held one upstream TTFT ago, and growing
// on every fast sample overshoots the knee before the first slow one is
// back.
//
// The long-term average is an exponential average over gradientLongWindow
// windows (a plain mean over the first gradientWarmup); when it is more
// than twice the window's mean (overload has ended) it decays by 10 % so
// that the limit recovers without waiting for the average. The limit does
// not move in a window whose in-flight count stayed below half of it (the
// load, not the upstream, bounds the concurrency), and does not grow in one
// whose in-flight count never reached it (it was not what bounded the
// concurrency, so a fast TTFT says nothing about a higher one), nor while
// fresh upstream figures show requests waiting there. At g = 0.5 the
// formula's fixed point is L = 4: below 4 only MinConcurrency bounds the
// limit, the controller alone does not go there.
//
// The limits l are passed on every call, so that a configuration reload
// changes them without losing what was learnt.
type gradientLimiter struct {
	long float64 // long-term average upstream TTFT, ns
	n    int     // windows in long

	start       time.Time // of the current window
	sum         float64   // upstream TTFT of the window's samples, ns
	samples     int
	drops       int
	maxInflight int
	queued      bool // a sample saw fresh upstream figures of waiting requests
}

const (
	gradientWindow        = time.Second
	gradientWindowSamples = 10
	gradientLongWindow    = 600
	gradientWarmup        = 10
	gradientSmoothing     = 0.2
)

func (c *gradientLimiter) next(l Limits, limit float64, s limitSample) float64 {
	if c.samples == 0 && c.drops == 0 {
		c.start = s.now
	}
	c.maxInflight = max(c.maxInflight, s.inflight)
	c.queued = c.queued || s.upstreamQueued
	if s.drop {
		c.drops++
	} else {
		c.samples++
		c.sum += math.Max(float64(s.upstream), 1) // never 0: the ratio divides by it
	}
	if c.samples+c.drops < gradientWindowSamples || s.now.Sub(c.start) < gradientWindow {
		return limit
	}
	defer func() { c.sum, c.samples, c.drops, c.maxInflight, c.queued = 0, 0, 0, 0, false }()
	g := 0.5
	if c.samples > 0 {
		short := c.sum / float64(c.samples)
		c.n++
		if c.n <= gradientWarmup {
			c.long += (short - c.long) / float64(c.n)
		} else {
			c.long += (short - c.long) * 2 / (gradientLongWindow + 1)
		}
		if c.long > 2*short {
			c.long *= 0.9
		}
		if target := float64(l.TargetTTFT); c.drops == 0 && (target == 0 || short <= target) {
			g = math.Max(0.5, math.Min(1, c.long/short))
		}
	}
	if float64(c.maxInflight) < limit/2 {
		return limit // bounded by the load, not the upstream
	}
	nl := g*limit + math.Sqrt(limit)
	nl = (1-gradientSmoothing)*limit + gradientSmoothing*nl
	if nl > limit && (c.queued || c.maxInflight < int(math.Max(1, math.Floor(limit)))) {
		nl = limit // the upstreams queue, or the limit was not reached
	}
	return math.Max(float64(l.MinConcurrency), math.Min(float64(l.MaxConcurrency), nl))
}
