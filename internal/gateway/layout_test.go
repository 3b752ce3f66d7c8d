package gateway

import (
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
)

// cacheLine is the CPU cache line size the per-event layout is made for
// (x86-64, arm64).
const cacheLine = 64

// linesSpanned is how many cache lines the memory from first through the
// end of last (of lastSize bytes) covers.
func linesSpanned(first, last unsafe.Pointer, lastSize uintptr) int {
	from, to := uintptr(first), uintptr(last)+lastSize
	return int((to-1)/cacheLine - from/cacheLine + 1)
}

// TestEventStateLayout keeps what a stream touches per event after its
// first token on the cache lines the exchange's and attemptBuf's doc
// comments say, measured on objects allocated as the gateway allocates
// them (on the heap, where the allocator's header and size class place
// them): the exchange's g, eventState, answer writer and stage clocks on
// three lines, the relay's per-event fields on one, the winning
// attempt's reader, timed body and classifier on eight.
func TestEventStateLayout(t *testing.T) {
	want := map[string]int{
		"exchange: g … tl.backpressure": 3,
		"exchange.rel: x … lastUse":     1,
		"attemptBuf: rd, up, probe":     8,
	}
	for i := range 4 {
		x := new(exchange)
		heapExchanges = append(heapExchanges, x) // escapes, as complete's does
		b := attemptBufs.Get().(*attemptBuf)
		got := map[string]int{
			"exchange: g … tl.backpressure": linesSpanned(unsafe.Pointer(&x.g), unsafe.Pointer(&x.tl.backpressure), unsafe.Sizeof(x.tl.backpressure)),
			"exchange.rel: x … lastUse":     linesSpanned(unsafe.Pointer(&x.rel.x), unsafe.Pointer(&x.rel.lastUse), unsafe.Sizeof(x.rel.lastUse)),
			"attemptBuf: rd, up, probe":     linesSpanned(unsafe.Pointer(&b.rd), unsafe.Pointer(&b.probe), unsafe.Sizeof(b.probe)),
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("allocation %d (exchange at %#x, attemptBuf at %#x): cache lines spanned (-want +got):\n%s",
				i, uintptr(unsafe.Pointer(x)), uintptr(unsafe.Pointer(b)), d)
		}
		attemptBufs.Put(b)
	}
	heapExchanges = nil
}

// heapExchanges makes TestEventStateLayout's exchanges escape to the heap
// (one that does not escape may live on the stack, placed otherwise).
var heapExchanges []*exchange
