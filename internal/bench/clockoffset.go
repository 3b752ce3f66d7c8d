package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/tokentrace/tokentrace/internal/httplimit"
)

// ClockOffset is this machine's wall clock against a reference clock:
// reference − local lies within Offset ± Uncertainty.
type ClockOffset struct {
	Offset      time.Duration
	Uncertainty time.Duration
	// Samples is the number of requests the estimate rests on.
	Samples int
}

// dateSample is one request to the reference: sent and answered at local
// wall-clock instants (nanoseconds since the Unix epoch), and the whole
// second its Date header gave.
type dateSample struct {
	sent, recv int64
	date       int64 // Unix seconds
}

// dateInterval is the set of offsets (reference − local, nanoseconds) that
// agree with every sample, [lo, hi). A server that stamps Date with its
// clock's whole second at some instant between a request's arrival and its
// answer read, at that instant, a time in [date, date + 1 s): so the
// offset is at least date − recv and below date + 1 s − sent. One sample
// bounds it within 1 s plus a round trip; two that straddle the server's
// tick of a second bound it within the time between the first's send and
// the second's answer.
func dateInterval(samples []dateSample) (lo, hi int64) {
	lo, hi = -1<<62, 1<<62
	for _, s := range samples {
		d := s.date * 1e9
		lo = max(lo, d-s.recv)
		hi = min(hi, d+1e9-s.sent)
	}
	return lo, hi
}

// errNoDate is a reference that sends no usable Date header.
var errNoDate = errors.New("the target sends no Date header")

// dateProbe asks the reference for its Date once.
type dateProbe func(ctx context.Context) (dateSample, error)

// offsetByDate measures reference − local from a reference's HTTP Date
// header (whole seconds): it samples every 20 ms until two samples
// straddle a tick of the reference's second, then, twice, samples densely
// (about 100 requests) across the next tick, predicted from the bounds so
// far. On a
// loopback the bound is a few round trips; the whole takes 2 to 3.5 s.
// now reads the local wall clock. A reference whose Date is not a reading
// of one clock (two servers behind a balancer disagreeing, a Date cached
// and refreshed off the second) gives samples that contradict each other:
// that is an error, not a bound.
func offsetByDate(ctx context.Context, probe dateProbe, now func() time.Time) (ClockOffset, error) {
	var samples []dateSample
	take := func() error {
		s, err := probe(ctx)
		if err != nil {
			return err
		}
		samples = append(samples, s)
		if lo, hi := dateInterval(samples); lo >= hi {
			return fmt.Errorf("the target's Date headers contradict each other (is it several servers, or a cached Date?)")
		}
		return nil
	}
	// Coarse: until a tick falls between two samples.
	for deadline := now().Add(3 * time.Second); ; {
		if err := take(); err != nil {
			return ClockOffset{}, err
		}
		if lo, hi := dateInterval(samples); hi-lo < 9e8 {
			break
		}
		if now().After(deadline) {
			return ClockOffset{}, errors.New("the target's Date header did not change for 3 s")
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return ClockOffset{}, err
		}
	}
	// Fine: back to back across the next ticks.
	for range 2 {
		lo, hi := dateInterval(samples)
		// The next tick of the reference's second, on the local clock: the
		// reference reads a whole second T at local T − offset.
		mid := (lo + hi) / 2
		local := now().UnixNano()
		tick := ((local+mid)/1e9+1)*1e9 - mid
		if tick-local < 100e6 { // too close to aim at: the one after
			tick += 1e9
		}
		half := (hi-lo)/2 + 2e6
		if err := sleepCtx(ctx, time.Duration(tick-half-local)); err != nil {
			return ClockOffset{}, err
		}
		// At most about 100 requests per window: a remote target's round
		// trip paces them anyway; a loopback one would answer thousands.
		spacing := time.Duration(2 * half / 100)
		for now().UnixNano() < tick+half {
			if err := take(); err != nil {
				return ClockOffset{}, err
			}
			if err := sleepCtx(ctx, spacing); err != nil {
				return ClockOffset{}, err
			}
		}
	}
	lo, hi := dateInterval(samples)
	return ClockOffset{Offset: time.Duration((lo + hi) / 2), Uncertainty: time.Duration((hi - lo + 1) / 2), Samples: len(samples)}, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// targetDateProbe asks the target's GET /v1/models for its Date header,
// on one kept-alive connection.
func targetDateProbe(t Target, now func() time.Time) (dateProbe, func(), error) {
	u, err := t.apiURL("/models")
	if err != nil {
		return nil, nil, err
	}
	tr := &http.Transport{Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 1, DisableCompression: true}
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second, CheckRedirect: httplimit.NoRedirects}
	probe := func(ctx context.Context) (dateSample, error) {
		req, err := t.newRequest(ctx, http.MethodGet, u)
		if err != nil {
			return dateSample{}, err
		}
		sent := now()
		resp, err := hc.Do(req)
		if err != nil {
			return dateSample{}, err
		}
		recv := now()
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		d, err := http.ParseTime(resp.Header.Get("Date"))
		if err != nil {
			return dateSample{}, errNoDate
		}
		return dateSample{sent: sent.UnixNano(), recv: recv.UnixNano(), date: d.Unix()}, nil
	}
	return probe, tr.CloseIdleConnections, nil
}

// MeasureClockOffset measures this machine's wall clock against the
// target's (the reference every shard of a run shares), from its HTTP Date
// header. It takes 2 to 3.5 s.
func MeasureClockOffset(ctx context.Context, t Target) (ClockOffset, error) {
	probe, done, err := targetDateProbe(t, time.Now)
	if err != nil {
		return ClockOffset{}, err
	}
	defer done()
	return offsetByDate(ctx, probe, time.Now)
}
