package bench

import (
	"context"
	"runtime"
	"time"
)

// Clock is the run's time source: a monotonic clock that reads the time
// since the run's start instant and sleeps until an absolute offset from
// it. Schedules are never kept with relative sleeps: a late wake-up does
// not shift the sends after it.
type Clock interface {
	// Now is the time since the start instant.
	Now() time.Duration
	// SleepUntil returns once Now() >= t, or with ctx's error.
	SleepUntil(ctx context.Context, t time.Duration) error
}

// realClock reads the monotonic clock through time.Since.
type realClock struct{ start time.Time }

// NewRealClock returns a Clock whose start instant is now.
func NewRealClock() Clock { return &realClock{start: time.Now()} }

// newRealClockAt returns a Clock whose start instant is at, a wall-clock
// instant, read on the monotonic clock from now on; Now is negative
// before it.
func newRealClockAt(at time.Time) Clock { return &realClock{start: time.Now().Add(time.Until(at))} }

func (c *realClock) Now() time.Duration { return time.Since(c.start) }

// spinBelow is how close to its target a sleep stops and yields in a loop
// instead: Go timers can fire up to ~1 ms late on a busy machine, and an
// open-loop schedule at thousands of requests per second needs better.
const spinBelow = time.Millisecond

func (c *realClock) SleepUntil(ctx context.Context, t time.Duration) error {
	for {
		d := t - c.Now()
		if d <= 0 {
			return ctx.Err()
		}
		if d <= spinBelow {
			// Short waits: yield rather than arm a timer.
			if err := ctx.Err(); err != nil {
				return err
			}
			runtime.Gosched()
			continue
		}
		tm := time.NewTimer(d - spinBelow/2)
		select {
		case <-ctx.Done():
			tm.Stop()
			return ctx.Err()
		case <-tm.C:
		}
	}
}
