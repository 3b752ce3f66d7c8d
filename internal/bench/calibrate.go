package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/stats"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// Calibration is this client's own added latency on this host, measured
// before a run against an in-process loopback server that streams on a
// known schedule: for each request, the client's arrival instant of the
// first content chunk minus the instant the server flushed it, both on the
// same monotonic clock. It includes the loopback hop, the HTTP and SSE
// parsing and the Go scheduler; a remote server adds the network on top.
type Calibration struct {
	Requests    int `json:"requests"`
	Concurrency int `json:"concurrency"`
	// TTFT error: client first-token instant − server flush instant.
	TTFTErrP50MS float64 `json:"ttft_err_p50_ms"`
	TTFTErrP99MS float64 `json:"ttft_err_p99_ms"`
	TTFTErrMaxMS float64 `json:"ttft_err_max_ms"`
	// ITL error: |client gap − server gap| between consecutive chunks
	// (timing jitter).
	ITLErrP50MS float64 `json:"itl_err_p50_ms"`
	ITLErrP99MS float64 `json:"itl_err_p99_ms"`
	// Floor is the P50 TTFT error: the overhead under every TTFT this
	// client measures on this host.
	FloorMS float64 `json:"floor_ms"`
	Errors  int     `json:"errors,omitempty"`
}

// fidelity is what calibrate and the self-test measure.
type fidelity struct {
	ttftErr, itlErr []int64
	errors          int
	wall            time.Duration
}

// measureFidelity sends n requests at the given concurrency through a bench
// Client to a loopback server streaming tokens chunks, first after first
// and then every gap.
func measureFidelity(ctx context.Context, n, conc, tokens int, first, gap time.Duration) (*fidelity, error) {
	clock := NewRealClock()
	now := func() int64 { return int64(clock.Now()) }
	lb, err := startLoopback(tokens, first, gap, now, true)
	if err != nil {
		return nil, err
	}
	defer lb.Close()
	cl, err := NewClient(Target{BaseURL: lb.URL(), Endpoint: EndpointChat, Model: "loopback", Stream: true, Timeout: 30 * time.Second}, now, 0)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	f := &fidelity{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan int)
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := workload.Request{Messages: nil, Prompt: "hi", MaxTokens: tokens, InputTokens: 2}
			for i := range next {
				rec := &latency.Record{ID: fmt.Sprintf("cal-%d", i)}
				cl.Do(ctx, &req, rec)
				fl := lb.flushed(rec.ID)
				mu.Lock()
				if !rec.OK() || len(fl) == 0 || len(rec.ChunkNS) != len(fl) {
					f.errors++
				} else {
					f.ttftErr = append(f.ttftErr, rec.FirstTokenNS-fl[0])
					for k := 1; k < len(fl); k++ {
						d := (rec.ChunkNS[k] - rec.ChunkNS[k-1]) - (fl[k] - fl[k-1])
						f.itlErr = append(f.itlErr, abs64(d))
					}
				}
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
	f.wall = time.Since(start)
	slices.Sort(f.ttftErr)
	slices.Sort(f.itlErr)
	return f, ctx.Err()
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// Calibrate measures the client's overhead floor: 200 requests of 8-chunk
// streams at concurrency 8 (about a quarter of a second).
func Calibrate(ctx context.Context) (*Calibration, error) {
	const n, conc = 200, 8
	f, err := measureFidelity(ctx, n, conc, 8, 2*time.Millisecond, time.Millisecond)
	if err != nil {
		return nil, fmt.Errorf("calibration: %w", err)
	}
	if len(f.ttftErr) == 0 {
		return nil, fmt.Errorf("calibration: every loopback request failed (%d)", f.errors)
	}
	ttft := func(p float64) float64 { return ms(stats.Percentile(f.ttftErr, p)) }
	itl := func(p float64) float64 { return ms(stats.Percentile(f.itlErr, p)) }
	c := &Calibration{Requests: n, Concurrency: conc, Errors: f.errors,
		TTFTErrP50MS: ttft(50), TTFTErrP99MS: ttft(99), TTFTErrMaxMS: ttft(100),
		ITLErrP50MS: itl(50), ITLErrP99MS: itl(99)}
	c.FloorMS = c.TTFTErrP50MS
	return c, nil
}
