package bench

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokentrace/tokentrace/internal/latency"
	"github.com/tokentrace/tokentrace/internal/racedetect"
	"github.com/tokentrace/tokentrace/internal/workload"
)

// inFlightBytes runs n streams through do against a loopback server that
// sends one token at once and the next after hold, and returns the live
// heap and the stacks per stream (client and server together) midway.
func inFlightBytes(t testing.TB, n int, do func(ctx context.Context, url string, i int)) (heap, stacks float64) {
	t.Helper()
	clock := NewRealClock()
	hold := 2 * time.Second
	lb, err := startLoopback(2, 0, hold, func() int64 { return int64(clock.Now()) }, false)
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	h0, s0 := liveParts()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			do(context.Background(), lb.URL(), i)
		}()
	}
	time.Sleep(hold / 2)
	h1, s1 := liveParts()
	wg.Wait()
	return (h1 - h0) / float64(n), (s1 - s0) / float64(n)
}

// liveParts returns the live heap objects and the goroutine stacks.
func liveParts() (heap, stacks float64) {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"}}
	metrics.Read(s)
	return float64(s[0].Value.Uint64()), float64(s[1].Value.Uint64())
}

// clientStream returns one stream through bench's client (made for the
// server's URL at the first call) and counts the streams that failed.
func clientStream(failed *atomic.Int64) (do func(ctx context.Context, url string, i int), closeClient func()) {
	var once sync.Once
	var c *Client
	do = func(ctx context.Context, url string, i int) {
		once.Do(func() {
			c, _ = NewClient(Target{BaseURL: url, Endpoint: EndpointChat, Model: "loopback", Stream: true, Timeout: time.Minute},
				func() int64 { return time.Now().UnixNano() }, 0)
		})
		req := workload.Request{Prompt: "hi", MaxTokens: 64, InputTokens: 2}
		rec := &latency.Record{ID: fmt.Sprint("mem-", i)}
		c.Do(ctx, &req, rec)
		if !rec.OK() || len(rec.ChunkNS) != 2 {
			failed.Add(1)
		}
	}
	return do, func() {
		if c != nil {
			c.Close()
		}
	}
}

// streamMemory returns the live heap and stacks per in-flight stream
// through bench's client, after a small warm-up pass (the runtime sizes
// new goroutines' stacks from the ones it has seen).
func streamMemory(t testing.TB, n int) (heap, stacks float64) {
	t.Helper()
	var failed atomic.Int64
	for _, k := range []int{n / 10, n} {
		do, closeClient := clientStream(&failed)
		heap, stacks = inFlightBytes(t, k, do)
		closeClient()
	}
	if f := failed.Load(); f > 0 {
		t.Fatalf("%d of %d streams failed", f, n+n/10)
	}
	return heap, stacks
}

// maxStreamHeap bounds the live heap per in-flight stream, bench's client
// and the loopback server together: the connection's buffers, the
// request, the record, the event reader. Measured 22.1–23.8 KiB with
// internal/h1 (27.5 KiB through net/http's Transport, 30.9 KiB before
// buffers were sized to need; docs/performance.md); one run in eight on a
// loaded machine read 39 KiB. A stream's memory decides bench's size at
// thousands of streams.
const maxStreamHeap = 29 << 10

// maxStreamStacks bounds the goroutine stacks per in-flight stream, client
// and loopback server together: measured 18.6–21.2 KiB with the client's
// one goroutine per stream (internal/h1), 26.1 KiB with net/http's reader
// and writer goroutines per connection beside it.
const maxStreamStacks = 24 << 10

func TestInFlightStreamMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a loopback server")
	}
	if racedetect.Enabled {
		t.Skip("the race detector's larger stacks and shadow memory are not the client's: measured without -race")
	}
	heap, stacks := streamMemory(t, 300)
	t.Logf("per in-flight stream (client and server together): heap %.0f B, stacks %.0f B", heap, stacks)
	if heap > maxStreamHeap {
		t.Errorf("live heap per in-flight stream %.0f B, more than %d", heap, maxStreamHeap)
	}
	if stacks > maxStreamStacks {
		t.Errorf("goroutine stacks per in-flight stream %.0f B, more than %d", stacks, maxStreamStacks)
	}
}

// BenchmarkInFlightStreamMemory reports the live heap and stacks per
// in-flight stream (bench's client and the loopback server together).
func BenchmarkInFlightStreamMemory(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		heap, stacks := streamMemory(b, 1000)
		b.ReportMetric(heap, "heap-B/stream")
		b.ReportMetric(stacks, "stack-B/stream")
	}
}

// maxFinishedRequestHeap bounds the live heap a finished request of 16
// tokens leaves behind in a run (its row in the report's collector, the
// exact gaps, the compatibility views; the record itself is written and
// dropped): measured 480–940 B, the exact gaps' slice doubling in steps
// (docs/performance.md). A record kept whole (≈ 700 B with its chunk
// instants) would cross it.
const maxFinishedRequestHeap = 1536

func TestFinishedRequestMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a loopback server")
	}
	if racedetect.Enabled {
		t.Skip("the race detector's shadow memory is not the client's: measured without -race")
	}
	res := &SelfTestResult{}
	if err := manyTest(context.Background(), SelfTestOptions{Many: 10000, Tokens: 16}, res); err != nil {
		t.Fatal(err)
	}
	t.Logf("live heap per finished request: %.0f B (%.1f → %.1f MiB)", res.BytesPerReq, res.HeapStartMB, res.HeapEndMB)
	if res.BytesPerReq > maxFinishedRequestHeap {
		t.Errorf("live heap per finished request %.0f B, more than %d", res.BytesPerReq, maxFinishedRequestHeap)
	}
}
