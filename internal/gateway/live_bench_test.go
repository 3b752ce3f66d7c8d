package gateway

import (
	"testing"
	"time"
)

// BenchmarkLiveOffer is the live view's cost on a request's path: building
// the finished request's record (64 content events) and offering it to
// the board (taken: the hand-off drained every 4,096 offers, outside the
// timer; full: every offer dropped and counted).
func BenchmarkLiveOffer(b *testing.B) {
	g := mustGateway(b, `
pools: [{name: p, replicas: [{url: "http://127.0.0.1:1"}]}]
routes: [{model: "*", pool: p}]
`)
	defer g.Close()
	board := g.NewLiveBoard(0)
	x := &exchange{g: g, status: 200}
	x.req.Stream = true
	x.tl.start = g.base.Add(time.Second)
	x.tl.admitted = x.tl.start.Add(time.Millisecond)
	x.tokens = 64
	for i := range 64 {
		x.chunkNS = append(x.chunkNS, int64(50+i*10)*int64(time.Millisecond))
	}
	rep := g.rt.Load().pools["p"].replicas[0]
	x.att.tried = append(x.att.triedBuf[:0], rep)
	st := stageDurations{In: 20 * time.Microsecond, Queue: time.Millisecond, Connect: 100 * time.Microsecond,
		UpstreamTTFT: 49 * time.Millisecond, Decode: 630 * time.Millisecond, Post: time.Millisecond}
	ttft := 50 * time.Millisecond
	b.Run("taken", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			if i%4096 == 4095 {
				b.StopTimer()
				board.Step(int64(2 * time.Second))
				b.StartTimer()
			}
			x.offerLive(st, ttft, "p")
		}
	})
	b.Run("full", func(b *testing.B) {
		for range 10000 {
			x.offerLive(st, ttft, "p")
		}
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			x.offerLive(st, ttft, "p")
		}
	})
}
