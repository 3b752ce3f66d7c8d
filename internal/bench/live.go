package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// Live is the progress line shown on a terminal while a run goes: sent,
// done, errors, the completion rate, and running P50/P99 TTFT (nearest
// rank from internal/stats's histogram, within 0.05 %; the final numbers
// come from the report, not from here).
type Live struct {
	nSent, nDone, nErr atomic.Int64

	ttfts stats.Concurrent
	mu    sync.Mutex      // guards snap
	snap  stats.Histogram // scratch for reading ttfts
}

func (l *Live) sent() { l.nSent.Add(1) }

func (l *Live) done(rec *latency.Record) {
	l.nDone.Add(1)
	if !rec.OK() {
		l.nErr.Add(1)
		return
	}
	if d, ok := rec.TTFT(); ok && d > 0 {
		l.ttfts.Add(int64(d))
	}
}

// ttft returns the running P50 and P99 of TTFT.
func (l *Live) ttft() (p50, p99 time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.ttfts.Snapshot(&l.snap)
	return time.Duration(h.Percentile(50)), time.Duration(h.Percentile(99))
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
