package engine

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/perfmodel"
	"github.com/tokentrace/tokentrace/internal/stats"
)

// BenchmarkIdleStreamMemory measures the heap one submitted, not yet
// scheduled request with its Stream costs (prompt excluded, context hook
// included), over 10,000 streams.
func BenchmarkIdleStreamMemory(b *testing.B) {
	const n = 10000
	b.ReportAllocs()
	var perStream float64
	for range b.N {
		cfg := testConfig()
		e, err := New(cfg, nil)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		streams := make([]*Stream, 0, n)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range n {
			st, err := e.Submit(ctx, Request{PromptLen: 100, MaxTokens: 100})
			if err != nil {
				b.Fatal(err)
			}
			streams = append(streams, st)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perStream = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(streams)
		cancel()
	}
	b.ReportMetric(perStream, "B/stream")
}

// BenchmarkWallStreams runs 10,000 concurrent streams through the
// wall-clock engine, one reader goroutine per stream (as an HTTP server
// has), and measures how late readers get tokens relative to the engine
// instant of their step (Event.At): p50, p99 and max lateness. Steps take
// a fixed 20 ms. "1024-running" uses vLLM's H100 batch limits (the rest
// wait); "10k-running" decodes all 10,000 in every step.
func BenchmarkWallStreams(b *testing.B) {
	for _, tc := range []struct {
		name    string
		maxSeqs int
		tokens  int
		spin    time.Duration
	}{
		{"1024-running", 1024, 8192, spinWindow},
		{"1024-running-nospin", 1024, 8192, 0},
		{"10k-running", 10000, 1 << 20, spinWindow},
	} {
		b.Run(tc.name, func(b *testing.B) {
			const n, out = 10000, 20
			var late, engineLag, startLag []time.Duration
			var events, tokens int
			for range b.N {
				cfg := Config{
					StepTimer:           StepTimerFunc(func(*perfmodel.Batch) time.Duration { return 20 * time.Millisecond }),
					NumBlocks:           n * 2,
					MaxModelLen:         256,
					MaxNumSeqs:          tc.maxSeqs,
					MaxNumBatchedTokens: tc.tokens,
				}
				e, err := New(cfg, spinClock{WallClock(), tc.spin})
				if err != nil {
					b.Fatal(err)
				}
				e.afterDeliver = func(d time.Duration) {
					if d <= 0 {
						startLag = append(startLag, -d)
					} else {
						engineLag = append(engineLag, d)
					}
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { _ = e.Run(ctx); close(done) }() // Run errs only when it already ran
				var mu sync.Mutex
				var wg sync.WaitGroup
				for range n {
					st, err := e.Submit(ctx, Request{PromptLen: 8, MaxTokens: out, IgnoreEOS: true})
					if err != nil {
						b.Fatal(err)
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						var mine []time.Duration
						got := 0
						for {
							ev, err := st.Recv(ctx)
							if err != nil {
								break
							}
							mine = append(mine, time.Since(ev.At))
							got += ev.Tokens
						}
						mu.Lock()
						late = append(late, mine...)
						events += len(mine)
						tokens += got
						mu.Unlock()
					}()
				}
				wg.Wait()
				cancel()
				<-done
			}
			if tokens != n*out*b.N {
				b.Fatalf("read %d tokens, want %d", tokens, n*out*b.N)
			}
			slices.Sort(late)
			µs := func(s []time.Duration, p float64) float64 { return float64(stats.Percentile(s, p).Microseconds()) }
			b.ReportMetric(µs(late, 50), "p50-late-µs")
			b.ReportMetric(µs(late, 99), "p99-late-µs")
			b.ReportMetric(µs(late, 100), "max-late-µs")
			b.ReportMetric(float64(tokens)/float64(events), "tokens/event")
			slices.Sort(engineLag)
			slices.Sort(startLag)
			b.ReportMetric(µs(startLag, 50), "p50-start-lag-µs")
			b.ReportMetric(µs(startLag, 99), "p99-start-lag-µs")
			b.ReportMetric(µs(engineLag, 50), "p50-engine-lag-µs")
			b.ReportMetric(µs(engineLag, 99), "p99-engine-lag-µs")
		})
	}
}

// spinClock is a clock (the wall clock, here) that spins on a step's
// deadline for spin instead of its own Spin: the benchmark's timer-only
// case chooses 0.
type spinClock struct {
	Clock
	spin time.Duration
}

func (c spinClock) Spin() time.Duration { return c.spin }
