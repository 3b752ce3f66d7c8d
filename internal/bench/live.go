package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
)

// Live is the progress line shown on a terminal while a run goes: sent,
// done, errors, the completion rate, and running P50/P99 TTFT (from a
// log-bucket histogram of 1 % resolution; the final numbers come from the
// report, not from here).
type Live struct {
	nSent, nDone, nErr atomic.Int64

	mu   sync.Mutex
	hist [2048]uint32
	n    uint32
}

func (l *Live) sent() { l.nSent.Add(1) }

func (l *Live) done(rec *latency.Record) {
	l.nDone.Add(1)
	if !rec.OK() {
		l.nErr.Add(1)
		return
	}
	if d, ok := rec.TTFT(); ok && d > 0 {
		i := min(int(math.Log(float64(d)/1e3)*100), len(l.hist)-1) // 1 µs .. ~ 10^8 s
		l.mu.Lock()
		l.hist[max(i, 0)]++
		l.n++
		l.mu.Unlock()
	}
}

// ttft returns the running P50 and P99 of TTFT.
func (l *Live) ttft() (p50, p99 time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == 0 {
		return 0, 0
	}
	at := func(q float64) time.Duration {
		want := uint32(math.Ceil(q * float64(l.n)))
		var c uint32
		for i, v := range l.hist {
			c += v
			if c >= want {
				return time.Duration(math.Exp(float64(i)/100) * 1e3)
			}
		}
		return 0
	}
	return at(0.5), at(0.99)
}

// Show redraws the progress line on w every interval until ctx is done,
// then ends the line.
func (l *Live) Show(ctx context.Context, w io.Writer, interval time.Duration, label func() string) {
	t := time.NewTicker(interval)
	defer t.Stop()
	start := time.Now()
	var lastDone int64
	last := start
	for {
		select {
		case <-ctx.Done():
			fmt.Fprint(w, "\r\033[K")
			return
		case now := <-t.C:
			done := l.nDone.Load()
			rate := float64(done-lastDone) / now.Sub(last).Seconds()
			lastDone, last = done, now
			p50, p99 := l.ttft()
			fmt.Fprintf(w, "\r\033[K%s sent %d  done %d  errors %d  %.1f req/s  TTFT p50 %s p99 %s  [%s]",
				label(), l.nSent.Load(), done, l.nErr.Load(), rate, round(p50), round(p99),
				now.Sub(start).Truncate(time.Second))
		}
	}
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
