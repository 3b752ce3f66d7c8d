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

// gradientLimiter is the pool's adaptive concurrency limit: the gradient
// idea of Netflix's concurrency-limits (Gradient2). Once per window of
// upstream TTFT samples it moves the limit L by
//
//	g  = clamp(long / short, 0.5, 1)
//	L' = (1−s)·L + s·(g·L + √L)          s = 0.2
//
// within [MinConcurrency, MaxConcurrency]; long is the long-term average
// TTFT, short the window's mean. docs/gateway.md ("Adaptive concurrency")
// gives the rule, its fixed points and why it updates per window. The
// limits l are passed on every call, so that a reload keeps what was
// learnt.
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
