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

// ClientFloor is this client's own added latency on this host, measured
// before a run against an in-process loopback server that streams on a
// known schedule: for each request, the client's arrival instant of the
// first content chunk minus the instant the server flushed it, both on the
// same monotonic clock. It includes the loopback hop, the HTTP and SSE
// parsing and the Go scheduler; a remote server adds the network on top.
type ClientFloor struct {
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

// fidelity is what MeasureClientFloor and the self-test measure: how far this
// client's instants are from the loopback server's flushes.
type fidelity struct {
	mu      sync.Mutex
	ttftErr []int64 // client first-token instant − server flush instant
	itlErr  []int64 // |client gap − server gap| between consecutive chunks
	errors  int
	wall    time.Duration
}

// add compares one answer with the server's flush instants: first is the
// client's first-token instant; chunks its chunk instants, nil when the
// client kept only the first (the minimal client). A failed answer, or one
// whose chunks do not match the flushes, counts as an error.
func (f *fidelity) add(ok bool, first int64, chunks, flushed []int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !ok || len(flushed) == 0 || (chunks != nil && len(chunks) != len(flushed)) {
		f.errors++
		return
	}
	f.ttftErr = append(f.ttftErr, first-flushed[0])
	for k := 1; k < len(chunks); k++ {
		f.itlErr = append(f.itlErr, abs64((chunks[k]-chunks[k-1])-(flushed[k]-flushed[k-1])))
	}
}

// addRecord compares a bench client's record with the server's flushes.
func (f *fidelity) addRecord(rec *latency.Record, flushed []int64) {
	f.add(rec.OK(), rec.FirstTokenNS, nonNil(rec.ChunkNS), flushed)
}

// nonNil is xs, or an empty slice for nil: a client that kept no chunk
// instants although it should have.
func nonNil(xs []int64) []int64 {
	if xs == nil {
		return []int64{}
	}
	return xs
}

// sorted sorts the errors for percentiles.
func (f *fidelity) sorted() *fidelity {
	slices.Sort(f.ttftErr)
	slices.Sort(f.itlErr)
	return f
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
				f.addRecord(rec, lb.flushed(rec.ID))
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
	return f.sorted(), ctx.Err()
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// MeasureClientFloor measures the client's overhead floor: 200 requests of 8-chunk
// streams at concurrency 8 (about a quarter of a second).
func MeasureClientFloor(ctx context.Context) (*ClientFloor, error) {
	const n, conc = 200, 8
	f, err := measureFidelity(ctx, n, conc, 8, 2*time.Millisecond, time.Millisecond)
	if err != nil {
		return nil, fmt.Errorf("client floor: %w", err)
	}
	if len(f.ttftErr) == 0 {
		return nil, fmt.Errorf("client floor: every loopback request failed (%d)", f.errors)
	}
	ttft := func(p float64) float64 { return ms(stats.Percentile(f.ttftErr, p)) }
	itl := func(p float64) float64 { return ms(stats.Percentile(f.itlErr, p)) }
	c := &ClientFloor{Requests: n, Concurrency: conc, Errors: f.errors,
		TTFTErrP50MS: ttft(50), TTFTErrP99MS: ttft(99), TTFTErrMaxMS: ttft(100),
		ITLErrP50MS: itl(50), ITLErrP99MS: itl(99)}
	c.FloorMS = c.TTFTErrP50MS
	return c, nil
}
