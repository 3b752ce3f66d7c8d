package calibrate

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/tokentrace/tokentrace/internal/engine"
)

// ClosedLoop is a closed-loop workload of identical requests: Clients each
// keep one request in flight; when a request's last token reaches its client
// the client sends the next one Gap later, until Requests have been sent in
// all. Gap is the client's turnaround (reading the end of the answer,
// building and sending the next request) plus the server's intake (parsing,
// tokenizing) before the engine sees the request.
type ClosedLoop struct {
	Clients, Requests int
	Input, Output     int
	// InputMin and OutputMin, when above 0, draw each request's lengths
	// uniformly in [min, 2 × mean − min] about Input and Output (their
	// means), as a client drawing random lengths sends them; 0: every
	// request has Input and Output exactly. Seeded by Seed.
	InputMin, OutputMin int
	Gap                 time.Duration
	// Jitter spreads each turnaround uniformly over [Gap, Gap+Jitter]:
	// clients and servers never take exactly the same time.
	Jitter time.Duration
	// Intake is the server's per-request intake (parsing, tokenizing)
	// before the engine sees a request; requests pass it one at a time, in
	// the order sent, as through a server's single front-end process.
	Intake time.Duration
	// FrontEnd is a delay every request takes after the intake, many at
	// once, before the engine sees it: an engine release's front end
	// (simulate.Config.FrontEnd), a latency rather than a server.
	FrontEnd time.Duration
	// Seed seeds the jitter.
	Seed uint64
}

func (w ClosedLoop) validate() error {
	switch {
	case w.Clients < 1:
		return fmt.Errorf("closed loop: clients must be ≥ 1 (got %d)", w.Clients)
	case w.Requests < w.Clients:
		return fmt.Errorf("closed loop: requests (%d) must be ≥ clients (%d)", w.Requests, w.Clients)
	case w.Input < 1 || w.Output < 1:
		return fmt.Errorf("closed loop: input and output lengths must be ≥ 1 (got %d, %d)", w.Input, w.Output)
	case w.InputMin < 0 || w.InputMin > w.Input || w.OutputMin < 0 || w.OutputMin > w.Output:
		return fmt.Errorf("closed loop: the least lengths (%d, %d) must be in [0, the mean lengths (%d, %d)]", w.InputMin, w.OutputMin, w.Input, w.Output)
	case w.Gap < 0:
		return fmt.Errorf("closed loop: gap must be ≥ 0 (got %v)", w.Gap)
	}
	return nil
}

// RunClosedLoop drives an engine on the virtual clock with w and returns
// every request's timeline in the order sent. The first Clients requests
// are sent at offset 0, as a benchmark client starts them. A timeline's
// Arrival is when its client sent the request, not when the engine saw
// it: the intake counts in its TTFT and E2E, as the client measures them.
func RunClosedLoop(cfg engine.Config, w ClosedLoop) ([]engine.Timeline, error) {
	if err := w.validate(); err != nil {
		return nil, err
	}
	v, err := engine.NewVirtual(cfg)
	if err != nil {
		return nil, err
	}
	out := make([]engine.Timeline, 0, w.Requests)
	var intakeFree time.Duration
	intake := func(sent time.Duration) arrival {
		intakeFree = max(intakeFree, sent) + w.Intake
		return arrival{at: intakeFree + w.FrontEnd, sent: sent}
	}
	sentAt := make([]time.Duration, 0, w.Requests)
	rng := rand.New(rand.NewPCG(w.Seed, w.Seed^0x9e3779b97f4a7c15))
	var pending arrivals
	for range w.Clients {
		var g time.Duration
		if w.Jitter > 0 {
			g = time.Duration(rng.Int64N(int64(w.Jitter) + 1))
		}
		heap.Push(&pending, intake(g))
	}
	sent, done := 0, 0
	var now time.Duration
	for done < w.Requests {
		for pending.Len() > 0 && pending[0].at <= now && sent < w.Requests {
			a := heap.Pop(&pending).(arrival)
			q := engine.Request{ID: fmt.Sprint(sent), PromptLen: drawLength(rng, w.Input, w.InputMin), MaxTokens: drawLength(rng, w.Output, w.OutputMin), IgnoreEOS: true}
			if _, err := v.Submit(now, sent, &q); err != nil {
				return nil, fmt.Errorf("closed loop: request %d: %w", sent, err)
			}
			out = append(out, engine.Timeline{})
			sentAt = append(sentAt, a.sent)
			sent++
		}
		end, ok := v.Start(now)
		if !ok {
			if pending.Len() == 0 || sent == w.Requests {
				return nil, errors.New("closed loop: the engine stalled with requests left")
			}
			now = pending[0].at
			continue
		}
		now = end
		for _, o := range v.Finish() {
			if o.Finish == "" {
				continue
			}
			tl := o.Timeline()
			tl.Arrival = engine.SimEpoch.Add(sentAt[o.ID()])
			out[o.ID()] = tl
			done++
			g := w.Gap
			if w.Jitter > 0 {
				g += time.Duration(rng.Int64N(int64(w.Jitter) + 1))
			}
			heap.Push(&pending, intake(now+g))
		}
	}
	return out, nil
}

// drawLength is a length drawn uniformly in [lo, 2 × mean − lo] (mean, when
// lo is 0).
func drawLength(rng *rand.Rand, mean, lo int) int {
	if lo <= 0 {
		return mean
	}
	return lo + rng.IntN(2*(mean-lo)+1)
}

// MaxLengths are the longest prompt and output w sends.
func (w ClosedLoop) MaxLengths() (input, output int) {
	input, output = w.Input, w.Output
	if w.InputMin > 0 {
		input = 2*w.Input - w.InputMin
	}
	if w.OutputMin > 0 {
		output = 2*w.Output - w.OutputMin
	}
	return input, output
}

// arrival is a request on its way to the engine: when the engine sees it
// (at) and when its client sent it.
type arrival struct{ at, sent time.Duration }

// arrivals is a min-heap of arrivals by the instant the engine sees them.
type arrivals []arrival

func (a arrivals) Len() int           { return len(a) }
func (a arrivals) Less(i, j int) bool { return a[i].at < a[j].at }
func (a arrivals) Swap(i, j int)      { a[i], a[j] = a[j], a[i] }
func (a *arrivals) Push(x any)        { *a = append(*a, x.(arrival)) }
func (a *arrivals) Pop() any {
	old := *a
	x := old[len(old)-1]
	*a = old[:len(old)-1]
	return x
}
