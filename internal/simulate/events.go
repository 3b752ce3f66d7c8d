package simulate

// Event kinds. Events at the same instant run in the order they were
// scheduled. A replica plans its next step when its step ends, before the
// events that step causes (docs/simulate.md, "Step boundaries"); an idle
// replica starts one on its first request; after the last event of an
// instant, every idle replica that was given work starts its next step.
const (
	evArrival  uint8 = iota // the next open-loop arrival
	evSend                  // a request's intended send (after think time)
	evRouter                // a request reaches the router (after the network)
	evStepEnd               // a replica's step ends
	evResponse              // a response's end (or error) reaches the client
	evExpire                // a queued request's TTFT deadline
	evStart                 // a closed-loop worker's start (ramp-up)
	evWake                  // an idle replica's KV transfer ends
	evFrontEnd              // a request leaves its replica's front end
)

type event struct {
	at   int64
	seq  uint64
	kind uint8
	id   int32 // call or replica index
}

// eventHeap is a binary min-heap on (at, seq).
type eventHeap struct {
	e   []event
	seq uint64
}

func (h *eventHeap) len() int { return len(h.e) }

func (h *eventHeap) less(i, j int) bool {
	a, b := &h.e[i], &h.e[j]
	return a.at < b.at || a.at == b.at && a.seq < b.seq
}

func (h *eventHeap) push(at int64, kind uint8, id int32) {
	h.seq++
	h.e = append(h.e, event{at: at, seq: h.seq, kind: kind, id: id})
	i := len(h.e) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h.e[i], h.e[p] = h.e[p], h.e[i]
		i = p
	}
}

// peek returns the earliest event's instant; the heap is not empty.
func (h *eventHeap) peek() int64 { return h.e[0].at }

func (h *eventHeap) pop() event {
	top := h.e[0]
	last := len(h.e) - 1
	h.e[0] = h.e[last]
	h.e = h.e[:last]
	i := 0
	for {
		l, m := 2*i+1, i
		if l < last && h.less(l, m) {
			m = l
		}
		if l+1 < last && h.less(l+1, m) {
			m = l + 1
		}
		if m == i {
			break
		}
		h.e[i], h.e[m] = h.e[m], h.e[i]
		i = m
	}
	return top
}
